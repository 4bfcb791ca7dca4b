//! What the rest of the glue stands on; it names nothing above (ARCHITECTURE.md).

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
