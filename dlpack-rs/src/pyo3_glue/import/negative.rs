//! torch's negative bit: a lazily negated view shares its base's memory un-negated, and torch
//! exports it as it is, so every `torch.Tensor` import refuses such a view.

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// What the check needs of torch, found once torch is imported (nothing here imports it).
struct Torch {
    /// `torch._C.TensorBase`: a static type, which a module posing as torch cannot make.
    base: Py<PyType>,
    /// `torch.Tensor`, a subclass of `base`.
    tensor: Py<PyType>,
    /// `TensorBase.is_neg`, the method descriptor (no instance attribute or patch stands in).
    is_neg: Py<PyAny>,
    /// `torch._C._disabled_torch_function_impl`, to call past a subclass's `__torch_function__`.
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
    if negative.is_truthy()? {
        return Err(PyBufferError::new_err(
            "cannot import a torch tensor whose negative bit is set: torch exports its memory \
             un-negated; call resolve_neg() first",
        ));
    }
    Ok(())
}
