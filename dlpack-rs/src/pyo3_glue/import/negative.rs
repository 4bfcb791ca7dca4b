//! torch's negative bit: a lazily negated view (`x._neg_view()`, the imaginary part of a
//! conjugated complex tensor) shares its base's memory un-negated, and torch's `__dlpack__` and
//! exchange table both export that memory as it is: every import of a `torch.Tensor` asks the
//! bit and refuses such a view.

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// `torch.Tensor`, once torch is imported (nothing here imports it: without torch in
/// `sys.modules` no object can be a torch tensor).
fn torch_tensor(py: Python<'_>) -> PyResult<Option<&Bound<'_, PyType>>> {
    static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    if let Some(ty) = TYPE.get(py) {
        return Ok(Some(ty.bind(py)));
    }
    let modules = py
        .import(pyo3::intern!(py, "sys"))?
        .getattr(pyo3::intern!(py, "modules"))?;
    let Ok(torch) = modules.get_item(pyo3::intern!(py, "torch")) else {
        return Ok(None);
    };
    let Ok(tensor) = torch
        .getattr(pyo3::intern!(py, "Tensor"))
        .and_then(|t| Ok(t.cast_into::<PyType>()?))
    else {
        // torch is being imported and has no `Tensor` yet: no tensor of it exists either.
        return Ok(None);
    };
    let ty = crate::pyo3_glue::runtime::once::get_or_init(&TYPE, py, || tensor.unbind());
    Ok(Some(ty.bind(py)))
}

/// `BufferError` for a torch tensor (a subclass's too) whose negative bit is set; `Ok` for
/// every other object. The cost on a plain tensor: the instance check and one call of
/// `is_neg()`.
pub(crate) fn refuse_negative_view(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = obj.py();
    let Some(tensor) = torch_tensor(py)? else {
        return Ok(());
    };
    if !obj.is_instance(tensor)? {
        return Ok(());
    }
    if obj.call_method0(pyo3::intern!(py, "is_neg"))?.is_truthy()? {
        return Err(PyBufferError::new_err(
            "cannot import a torch tensor whose negative bit is set: torch exports its memory \
             un-negated; call resolve_neg() first",
        ));
    }
    Ok(())
}
