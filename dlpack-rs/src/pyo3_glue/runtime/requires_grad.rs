//! What torch's `__dlpack__` refuses but its exchange table does not check: a tensor that
//! requires grad, and a lazily negated view (negative bit), whose memory holds un-negated values.

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyType};

/// How a type's `requires_grad` is read (found once per type, kept in the exchange-table cache).
#[derive(Clone, Copy)]
pub(crate) enum Grad {
    Absent,
    Getattr,
    /// Through the C getter of the type's getset descriptor (torch's), while the type's version
    /// tag is still `version`, the one it had when the descriptor was found.
    #[cfg_attr(feature = "abi3", allow(dead_code))]
    Getter {
        get: pyo3::ffi::getter,
        closure: usize,
        version: u32,
    },
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
            Grad::Getter {
                get,
                closure: closure as usize,
                version: tag,
            }
        }
        #[cfg(feature = "abi3")]
        {
            let _ = (ty, descr, tag);
            Grad::Getattr
        }
    }

    /// The three words (kind, getter, closure) the exchange-table cache stores lock-free; the
    /// version is the cache entry's own tag.
    pub(crate) fn to_words(self) -> (usize, *mut (), usize) {
        match self {
            Grad::Absent => (0, core::ptr::null_mut(), 0),
            Grad::Getattr => (1, core::ptr::null_mut(), 0),
            Grad::Getter { get, closure, .. } => (2, get as *mut (), closure),
        }
    }

    /// The `Grad` [`to_words`](Self::to_words) made these words from, with `version` the tag
    /// the cache entry holds under.
    /// # Safety
    /// The words come from one `to_words` call (a non-NULL kind-2 `get` is a getter's pointer,
    /// with its provenance).
    pub(crate) unsafe fn from_words(
        kind: usize,
        get: *mut (),
        closure: usize,
        version: u32,
    ) -> Grad {
        match kind {
            0 => Grad::Absent,
            2 if !get.is_null() => Grad::Getter {
                // SAFETY: by the contract, a pointer (with its provenance) made from this getter.
                get: unsafe { core::mem::transmute::<*mut (), pyo3::ffi::getter>(get) },
                closure,
                version,
            },
            _ => Grad::Getattr,
        }
    }
}

/// Whether `obj` requires grad (read as `grad` says); an error reading it counts as no.
fn requires_grad(obj: &Bound<'_, PyAny>, grad: Grad) -> bool {
    match grad {
        Grad::Absent => false,
        Grad::Getattr => obj
            .getattr(pyo3::intern!(obj.py(), "requires_grad"))
            .and_then(|g| g.is_truthy())
            .unwrap_or(false),
        #[cfg(feature = "abi3")]
        Grad::Getter { .. } => requires_grad(obj, Grad::Getattr),
        #[cfg(not(feature = "abi3"))]
        Grad::Getter {
            get,
            closure,
            version,
        } => {
            let ty = obj.get_type_ptr();
            // SAFETY: `obj`'s type is live.
            let applies =
                unsafe { crate::pyo3_glue::runtime::cpython::type_version(ty) == version };
            if !applies {
                // The type changed, or the descriptor is another type's: use `getattr`.
                return requires_grad(obj, Grad::Getattr);
            }
            // SAFETY: attached (the `Bound`); the getset getter of a static type (its table
            // outlives the descriptor) that `getattr` finds on `obj`'s unchanged type, given an
            // instance of the owning type; it returns a new reference or NULL with an exception.
            let value = unsafe {
                Bound::from_owned_ptr_or_err(obj.py(), get(obj.as_ptr(), closure as *mut _))
            };
            value.is_ok_and(|v| is_true(&v).unwrap_or(false))
        }
    }
}

/// `bool(value)`, answered without a call for `True` and `False` (what torch's getters return).
#[inline]
fn is_true(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = value.py();
    if value.as_ptr() == PyBool::new(py, false).as_ptr() {
        Ok(false)
    } else if value.as_ptr() == PyBool::new(py, true).as_ptr() {
        Ok(true)
    } else {
        value.is_truthy()
    }
}

/// Refuses a tensor that requires grad or has the negative bit (answers if it asked).
pub(crate) fn refuse_what_dlpack_refuses(obj: &Bound<'_, PyAny>, grad: Grad) -> PyResult<bool> {
    if matches!(grad, Grad::Absent) {
        return Ok(false);
    }
    if requires_grad(obj, grad) {
        return Err(PyBufferError::new_err(
            "cannot import a tensor that requires grad (the producer's __dlpack__ refuses it \
             too): use tensor.detach()",
        ));
    }
    refuse_negative_view(obj).map(|()| true)
}

/// What the negative-bit check and the exchange lookup need of torch, if it is imported already.
struct Torch {
    /// `torch._C.TensorBase`: a static type, which a module posing as torch cannot make.
    base: Py<PyType>,
    /// `torch.Tensor`, a subclass of `base`.
    tensor: Py<PyType>,
    /// `TensorBase.is_neg`, the method descriptor (no instance attribute or patch stands in).
    is_neg: Py<PyAny>,
    /// `torch._C._disabled_torch_function_impl` (a built-in), to call past `__torch_function__`.
    disabled: Py<PyAny>,
}

fn torch(py: Python<'_>) -> PyResult<Option<&Torch>> {
    static TORCH: PyOnceLock<Torch> = PyOnceLock::new();
    if let Some(found) = TORCH.get(py) {
        return Ok(Some(found));
    }
    let Some(torch) =
        crate::pyo3_glue::runtime::cpython::imported_module(py, pyo3::intern!(py, "torch"))?
    else {
        return Ok(None);
    };
    let found = (|| -> PyResult<Option<Torch>> {
        let c = torch.getattr("_C")?;
        let base = c.getattr("TensorBase")?.cast_into::<PyType>()?;
        let tensor = torch.getattr("Tensor")?.cast_into::<PyType>()?;
        let genuine = crate::pyo3_glue::runtime::cpython::is_static_type(&base);
        if !genuine || !tensor.is_subclass(&base)? {
            return Ok(None);
        }
        let is_neg = base.getattr("is_neg")?;
        let disabled = c.getattr("_disabled_torch_function_impl")?;
        // A built-in function's name is its C definition's (read-only): a module posing as
        // torch (with torch's own types) cannot name another object "dispatches nothing".
        let builtin = disabled.is_exact_instance_of::<pyo3::types::PyCFunction>()
            && disabled
                .getattr(pyo3::intern!(py, "__name__"))?
                .eq("_disabled_torch_function_impl")?;
        if !builtin {
            return Ok(None);
        }
        Ok(Some(Torch {
            base: base.unbind(),
            tensor: tensor.unbind(),
            is_neg: is_neg.unbind(),
            disabled: disabled.unbind(),
        }))
    })();
    // Not torch, or torch mid-import (no tensor exists yet): keep nothing, ask again next time.
    let Ok(Some(found)) = found else {
        return Ok(None);
    };
    Ok(Some(crate::pyo3_glue::runtime::once::get_or_init(
        &TORCH,
        py,
        || found,
    )))
}

/// Whether `f` is `torch._C._disabled_torch_function_impl` (torch being imported).
pub(crate) fn is_disabled_torch_function(f: &Bound<'_, PyAny>) -> bool {
    matches!(torch(f.py()), Ok(Some(torch)) if torch.disabled.is(f))
}

/// `BufferError` for a torch tensor (or subclass) whose negative bit is set.
pub(crate) fn refuse_negative_view(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = obj.py();
    let Some(torch) = torch(py)? else {
        return Ok(());
    };
    let negative = if obj.get_type_ptr() == torch.tensor.as_ptr().cast() {
        crate::pyo3_glue::runtime::cpython::call_one(torch.is_neg.bind(py), obj)?
    } else {
        let ty = obj.get_type();
        if !ty.is_subclass(torch.base.bind(py))? {
            return Ok(());
        }
        torch
            .disabled
            .bind(py)
            .call1((torch.is_neg.bind(py), (ty,), (obj,)))?
    };
    if is_true(&negative)? {
        return Err(PyBufferError::new_err(
            "cannot import a torch tensor whose negative bit is set: torch exports its memory \
             un-negated; call resolve_neg() first",
        ));
    }
    Ok(())
}
