//! The Python side of DLPack (feature `pyo3`): export with the `__dlpack__` protocol and import
//! of any object that implements it.
