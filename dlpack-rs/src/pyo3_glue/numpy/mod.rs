//! numpy without numpy's Python API: its array type recognised and its struct read (`array`),
//! imports and views made from that struct (`direct`), and rust-numpy's shared borrow table:
//! its client (`borrow`) and our implementation of it (`table`).

pub(in crate::pyo3_glue) mod array;
pub(in crate::pyo3_glue) mod borrow;
pub(in crate::pyo3_glue) mod direct;
mod table;
