//! Export to Python: `__dlpack__` arguments and the capsule they ask for (`protocol`), pyclass
//! export (`class_export`, `dlpack_method`), the C exchange table as producer
//! (`exchange_export`, `class_table`), results handed back into a framework (`framework`), and
//! `dlpack_rs.Tensor` (`tensor`).

pub(crate) mod class_export;
pub(crate) mod class_table;
pub(crate) mod dlpack_method;
pub(in crate::pyo3_glue) mod exchange_export;
pub(in crate::pyo3_glue) mod framework;
pub(in crate::pyo3_glue) mod protocol;
pub(in crate::pyo3_glue) mod tensor;
