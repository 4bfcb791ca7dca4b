//! dlpack-rs 0.3's import accessors, kept as deprecated bridges (docs/migrating-from-0.3.md).

use crate::pyo3_glue::PyTensor;

/// dlpack-rs 0.3's answer to "which capsule did the producer hand over".
#[deprecated(
    since = "0.4.0",
    note = "use `PyTensor::is_versioned()` (true for `Versioned`)"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DLPackVariant {
    /// A legacy `DLManagedTensor` (capsule `"dltensor"`).
    Legacy,
    /// A `DLManagedTensorVersioned` (capsule `"dltensor_versioned"`).
    Versioned,
}

#[allow(deprecated)]
impl PyTensor {
    /// dlpack-rs 0.3's name of [`is_versioned`](crate::safe::AnyManaged::is_versioned), as an enum.
    ///
    /// ```
    /// # #![allow(deprecated)]
    /// # use dlpack_rs::pyo3_glue::{DLPackVariant, PyTensor};
    /// # use pyo3::prelude::*;
    /// # Python::initialize();
    /// # Python::attach(|py| {
    /// let export = dlpack_rs::safe::Export::new(vec![1u16, 2]);
    /// let t = dlpack_rs::pyo3_glue::DLPackTensor::from_export(export).unwrap();
    /// let t = PyTensor::from_pyany(py, &Bound::new(py, t).unwrap().into_any()).unwrap();
    /// assert_eq!(t.dlpack_version(), DLPackVariant::Versioned);
    /// assert_eq!(t.element_size(), 2);
    /// # });
    /// ```
    #[deprecated(since = "0.4.0", note = "use `is_versioned()`")]
    pub fn dlpack_version(&self) -> DLPackVariant {
        if self.is_versioned() {
            DLPackVariant::Versioned
        } else {
            DLPackVariant::Legacy
        }
    }

    /// dlpack-rs 0.3's element size in bytes, `ceil(bits / 8) * lanes` (a packed sub-byte
    /// element counts a byte; [`nbytes`](crate::safe::AnyManaged::nbytes) is the span).
    #[deprecated(
        since = "0.4.0",
        note = "use `dtype()`: `usize::from(d.bits).div_ceil(8) * usize::from(d.lanes)`"
    )]
    pub fn element_size(&self) -> usize {
        let d = self.dtype();
        usize::from(d.bits).div_ceil(8) * usize::from(d.lanes)
    }
}
