//! Export to Python: `__dlpack__`, C exchange tables, `Returned` and `dlpack_rs.Tensor`.

pub(crate) mod class_export;
pub(crate) mod dlpack_method;
pub(crate) mod exchange_export;
pub(in crate::pyo3_glue) mod framework;
pub(in crate::pyo3_glue) mod protocol;
