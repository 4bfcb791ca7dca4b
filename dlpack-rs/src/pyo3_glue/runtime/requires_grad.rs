//! Whether a tensor requires grad (torch's `__dlpack__` refuses such tensors, its table does not).

use pyo3::prelude::*;
use pyo3::types::PyType;

/// How a type's `requires_grad` is read (found once per type, kept in the exchange-table cache).
#[derive(Clone, Copy)]
pub(crate) enum Grad {
    /// The type has none.
    Absent,
    /// Through `getattr`.
    Getattr,
    /// Through the C getter of the type's getset descriptor (torch's), while it is unchanged.
    #[cfg_attr(feature = "abi3", allow(dead_code))]
    Getter(DirectGetter),
}

/// A getset descriptor's C getter, called directly while the type it was found on is unchanged.
#[derive(Clone, Copy)]
#[cfg_attr(feature = "abi3", allow(dead_code))]
pub(crate) struct DirectGetter {
    get: pyo3::ffi::getter,
    closure: usize,
    /// The type's version tag when the descriptor was found.
    version: u32,
}

impl Grad {
    /// How instances of `ty` read `requires_grad`, given `descr` and the prior version `tag`.
    pub(crate) fn of_descriptor(
        ty: &Bound<'_, PyType>,
        descr: &Bound<'_, PyAny>,
        tag: u32,
    ) -> Grad {
        #[cfg(not(feature = "abi3"))]
        {
            // The tag was read before `descr` was found: the owning-type check holds while it does.
            if tag == 0 {
                return Grad::Getattr;
            }
            // SAFETY: attached (the `Bound`s prove it), both live.
            let Some((get, closure)) = (unsafe {
                crate::pyo3_glue::runtime::cpython::getset_getter(descr.as_ptr(), ty.as_type_ptr())
            }) else {
                return Grad::Getattr;
            };
            Grad::Getter(DirectGetter {
                get,
                closure: closure as usize,
                version: tag,
            })
        }
        #[cfg(feature = "abi3")]
        {
            let _ = (ty, descr, tag);
            Grad::Getattr
        }
    }

    /// The four words (kind, getter, closure, version) the exchange-table cache stores lock-free.
    pub(crate) fn to_words(self) -> (usize, *mut (), usize, usize) {
        match self {
            Grad::Absent => (0, core::ptr::null_mut(), 0, 0),
            Grad::Getattr => (1, core::ptr::null_mut(), 0, 0),
            Grad::Getter(g) => (2, g.get as *mut (), g.closure, g.version as usize),
        }
    }

    /// The `Grad` [`to_words`](Self::to_words) made these words from.
    /// # Safety
    /// The words come from one `to_words` call (a non-NULL kind-2 `get` is a getter's pointer,
    /// with its provenance).
    pub(crate) unsafe fn from_words(
        kind: usize,
        get: *mut (),
        closure: usize,
        version: usize,
    ) -> Grad {
        match kind {
            0 => Grad::Absent,
            2 if !get.is_null() => Grad::Getter(DirectGetter {
                // SAFETY: by the contract, a pointer (with its provenance) made from this getter.
                get: unsafe { core::mem::transmute::<*mut (), pyo3::ffi::getter>(get) },
                closure,
                version: version as u32,
            }),
            _ => Grad::Getattr,
        }
    }
}

/// Whether `obj` requires grad (read as `grad` says); an error reading it counts as no.
pub(crate) fn requires_grad(obj: &Bound<'_, PyAny>, grad: Grad) -> bool {
    match grad {
        Grad::Absent => false,
        Grad::Getattr => obj
            .getattr(pyo3::intern!(obj.py(), "requires_grad"))
            .and_then(|g| g.is_truthy())
            .unwrap_or(false),
        #[cfg(feature = "abi3")]
        Grad::Getter(_) => requires_grad(obj, Grad::Getattr),
        #[cfg(not(feature = "abi3"))]
        Grad::Getter(g) => {
            let ty = obj.get_type_ptr();
            // SAFETY: `obj`'s type is live.
            let applies =
                unsafe { crate::pyo3_glue::runtime::cpython::type_version(ty) == g.version };
            if !applies {
                // The type changed, or the descriptor is another type's: use `getattr`.
                return requires_grad(obj, Grad::Getattr);
            }
            // SAFETY: attached (the `Bound` proves it); a static type's getset getter (its table
            // lives for the process, even if the descriptor does not) that `getattr` would find
            // on `obj`'s unchanged type, given an instance of the owning type (CPython's check
            // before calling it); it returns a new reference or NULL with an exception set.
            let value = unsafe {
                Bound::from_owned_ptr_or_err(obj.py(), (g.get)(obj.as_ptr(), g.closure as *mut _))
            };
            value.is_ok_and(|v| v.is_truthy().unwrap_or(false))
        }
    }
}
