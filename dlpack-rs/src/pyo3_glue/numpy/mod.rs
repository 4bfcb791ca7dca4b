//! numpy without numpy's Python API: its array struct read, and rust-numpy's borrow table.

pub(in crate::pyo3_glue) mod array;
pub(in crate::pyo3_glue) mod borrow;
pub(in crate::pyo3_glue) mod direct;
mod table;
