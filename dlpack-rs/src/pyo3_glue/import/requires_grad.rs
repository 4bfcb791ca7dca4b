//! Whether a producer's tensor requires grad (torch's quirk): torch's `__dlpack__` refuses such
//! tensors but its exchange table hands them out, so an import through the table must read
//! `requires_grad` itself, and does so through the getset descriptor's C getter while the
//! tensor's type is unchanged (cheaper than `getattr`, the same answer).

use pyo3::prelude::*;
use pyo3::types::PyType;

/// How a type's `requires_grad` is read (found once per type, kept in the exchange-table cache).
#[derive(Clone, Copy)]
pub(crate) enum Grad {
    /// The type has none.
    Absent,
    /// Through `getattr`.
    Getattr,
    /// Through the C getter of the type's own getset descriptor (torch's), as `getattr` would
    /// call it, without the attribute look-up, while the type is unchanged.
    #[cfg_attr(feature = "abi3", allow(dead_code))]
    Getter(DirectGetter),
}

/// A getset descriptor's C getter, called directly while the type it was found on is unchanged.
#[derive(Clone, Copy)]
#[cfg_attr(feature = "abi3", allow(dead_code))]
pub(crate) struct DirectGetter {
    get: pyo3::ffi::getter,
    closure: usize,
    /// The type's version tag when the descriptor was found, and found to belong to one of its
    /// bases (CPython >= 3.11 resets the tag to 0 on any change to the type, its dictionary or
    /// its bases, and never reuses one): while it is unchanged, `getattr` finds this very
    /// descriptor, and the type's instances are instances of the descriptor's owning type.
    version: u32,
}

impl Grad {
    /// How instances of `ty` read their `requires_grad`, found as `descr` on `ty` under the
    /// type's version tag `tag` (read before the look-up; 0 where tags do not say reliably that
    /// a type changed: under the stable ABI, which hides them, before CPython 3.11, and for
    /// types whose tag could not be assigned): through the descriptor's C getter when it is a
    /// getset descriptor of a static base of `ty`, else through `getattr`.
    pub(crate) fn of_descriptor(
        ty: &Bound<'_, PyType>,
        descr: &Bound<'_, PyAny>,
        tag: u32,
    ) -> Grad {
        #[cfg(not(feature = "abi3"))]
        {
            // The tag was read before `descr` was found, and the owning-type check is made
            // now: the check holds while the tag does (the MRO cannot change without resetting
            // it), also when another thread changes the type in between (free-threaded
            // builds), and a getter found after such a change is never cached under the tag
            // from before it. A type without a tag cannot be checked later.
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

    /// The four words the exchange-table cache's lock-free copy stores (kind, getter, closure,
    /// version).
    pub(crate) fn to_words(self) -> (usize, *mut (), usize, usize) {
        match self {
            Grad::Absent => (0, core::ptr::null_mut(), 0, 0),
            Grad::Getattr => (1, core::ptr::null_mut(), 0, 0),
            Grad::Getter(g) => (2, g.get as *mut (), g.closure, g.version as usize),
        }
    }

    /// The answer [`to_words`](Self::to_words) made these words from.
    ///
    /// # Safety
    ///
    /// The words come from one `to_words` call (a non-NULL `get` of kind 2 is a getter's
    /// pointer, with its provenance).
    pub(crate) unsafe fn from_words(
        kind: usize,
        get: *mut (),
        closure: usize,
        version: usize,
    ) -> Grad {
        match kind {
            0 => Grad::Absent,
            2 if !get.is_null() => Grad::Getter(DirectGetter {
                // SAFETY: by this function's contract, a pointer (with its provenance) turned
                // back into the function pointer it was made from.
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
                // The type changed since the descriptor was found (a new `requires_grad` could
                // shadow it), or the descriptor belongs to another type (a class body may copy
                // one): whatever `getattr` does.
                return requires_grad(obj, Grad::Getattr);
            }
            // SAFETY: the getter of a static type's getset descriptor (its table lives for the
            // process, whether or not the descriptor does) that `getattr` would find on `obj`'s
            // unchanged type, given an instance of the descriptor's owning type (the check
            // CPython makes before calling it).
            let value = unsafe {
                crate::pyo3_glue::runtime::cpython::call_getter(
                    obj,
                    g.get,
                    g.closure as *mut core::ffi::c_void,
                )
            };
            match value {
                Ok(value) => value.is_truthy().unwrap_or(false),
                Err(_) => false,
            }
        }
    }
}
