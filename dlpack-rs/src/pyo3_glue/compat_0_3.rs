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
    #[deprecated(since = "0.4.0", note = "use `is_versioned()`")]
    pub fn dlpack_version(&self) -> DLPackVariant {
        if self.is_versioned() {
            DLPackVariant::Versioned
        } else {
            DLPackVariant::Legacy
        }
    }

    /// dlpack-rs 0.3's element size in bytes, `ceil(bits / 8) * lanes`.
    #[deprecated(
        since = "0.4.0",
        note = "use `dtype()`: `usize::from(d.bits).div_ceil(8) * usize::from(d.lanes)`"
    )]
    pub fn element_size(&self) -> usize {
        let d = self.dtype();
        usize::from(d.bits).div_ceil(8) * usize::from(d.lanes)
    }
}
