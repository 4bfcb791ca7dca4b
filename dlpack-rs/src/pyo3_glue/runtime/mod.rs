//! What the rest of the glue stands on: CPython calls and the panic guard (`cpython`), one-time
//! values (`once`), the per-interpreter shared registry (`shared_registry`), keepalives and
//! deleters that may touch Python (`keepalive`), capsules (`capsule`) and Python exceptions
//! (`errors`); and what both `export/` and `import/` ask: a type's exchange table
//! (`exchange_lookup`, with torch's `requires_grad` reader, `requires_grad`) and the typing
//! stubs' names (`type_hints`). It names nothing of `export/`, `import/` or `numpy/`.

pub(crate) mod capsule;
pub(in crate::pyo3_glue) mod cpython;
pub(in crate::pyo3_glue) mod errors;
pub(in crate::pyo3_glue) mod exchange_lookup;
pub(in crate::pyo3_glue) mod keepalive;
pub(in crate::pyo3_glue) mod once;
pub(in crate::pyo3_glue) mod requires_grad;
pub(in crate::pyo3_glue) mod shared_registry;
#[cfg(feature = "inspect")]
pub(in crate::pyo3_glue) mod type_hints;
