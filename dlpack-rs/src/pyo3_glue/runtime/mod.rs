//! What the rest of the glue stands on: CPython calls and the panic guard (`cpython`), one-time
//! values (`once`), the per-interpreter shared registry (`shared_registry`), keepalives and
//! deleters that may touch Python (`keepalive`), capsules (`capsule`) and Python exceptions
//! (`errors`). It names nothing of `export/`, `import/` or `numpy/`.

pub(crate) mod capsule;
pub(in crate::pyo3_glue) mod cpython;
pub(in crate::pyo3_glue) mod errors;
pub(in crate::pyo3_glue) mod keepalive;
pub(in crate::pyo3_glue) mod once;
pub(in crate::pyo3_glue) mod shared_registry;
