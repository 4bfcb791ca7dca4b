//! The export trait: a Rust value that can describe its memory as a DLPack tensor and become
//! the keepalive of that tensor.

use crate::ffi::DLPACK_FLAG_BITMASK_READ_ONLY;
use crate::safe::{self, TensorInfo};

#[cfg(feature = "pyo3")]
use pyo3::{types::PyCapsule, Bound, PyResult, Python};

/// A Rust value whose memory can be exported as a DLPack tensor.
///
/// Implement [`IntoDLPack::tensor_info`] (and [`IntoDLPack::is_read_only`] for memory that
/// consumers must not write); the provided methods move the value into a managed tensor whose
/// deleter drops it, so the memory lives exactly as long as the last consumer needs it.
///
/// # Contract
///
/// `tensor_info` must describe memory that stays valid, and in place, for as long as the value
/// lives, even when the value itself is moved (heap memory owned by the value, such as a
/// `Vec`'s buffer, satisfies this; an inline array field does not). Unless `is_read_only`
/// returns true, consumers may write through the exported pointer while they hold the tensor.
///
/// ```
/// use dlpack_rs::safe::{cpu_device, dtype_f32, TensorInfo};
/// use dlpack_rs::IntoDLPack;
///
/// struct MyTensor(Vec<f32>);
///
/// impl IntoDLPack for MyTensor {
///     fn tensor_info(&self) -> TensorInfo {
///         TensorInfo::contiguous(
///             self.0.as_ptr() as *mut _,
///             cpu_device(),
///             dtype_f32(),
///             vec![self.0.len() as i64],
///         )
///     }
/// }
///
/// let mt = MyTensor(vec![1.0, 2.0, 3.0]).into_managed_tensor_versioned()?;
/// assert_eq!(mt.as_slice::<f32>()?, &[1.0, 2.0, 3.0]);
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
pub trait IntoDLPack {
    /// Describes the memory to export: pointer, device, dtype, shape, strides, byte offset.
    fn tensor_info(&self) -> TensorInfo;

    /// Whether consumers must not write to the memory. Read-only data is exported with the
    /// `READ_ONLY` flag and cannot be exported as a legacy (unversioned) tensor.
    fn is_read_only(&self) -> bool {
        false
    }

    /// Moves `self` into a legacy managed tensor whose deleter drops it.
    ///
    /// Fails with [`safe::Error::ReadOnly`] for read-only data (the legacy struct cannot say
    /// so), or with the validation error of an invalid [`TensorInfo`].
    fn into_managed_tensor(self) -> Result<safe::ManagedTensor, safe::Error>
    where
        Self: Sized + Send + 'static,
    {
        if self.is_read_only() {
            return Err(safe::Error::ReadOnly);
        }
        let info = self.tensor_info();
        safe::pack_owned(self, info)
    }

    /// Moves `self` into a versioned (DLPack 1.3) managed tensor whose deleter drops it,
    /// flagged `READ_ONLY` when [`IntoDLPack::is_read_only`] says so.
    fn into_managed_tensor_versioned(self) -> Result<safe::ManagedTensorVersioned, safe::Error>
    where
        Self: Sized + Send + 'static,
    {
        let flags = if self.is_read_only() {
            DLPACK_FLAG_BITMASK_READ_ONLY
        } else {
            0
        };
        let info = self.tensor_info();
        safe::pack_owned_versioned(self, info, flags)
    }

    /// Moves `self` into a legacy `"dltensor"` capsule (the return value of a legacy
    /// `__dlpack__()`). Raises `BufferError` for read-only data.
    ///
    /// The capsule's destructor calls the deleter only if no consumer took the tensor.
    #[cfg(feature = "pyo3")]
    fn into_capsule<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>>
    where
        Self: Sized + Send + 'static,
    {
        let mt = self.into_managed_tensor()?;
        crate::pyo3_glue::capsule::legacy_capsule(py, mt)
    }

    /// Moves `self` into a `"dltensor_versioned"` capsule (DLPack 1.3), flagged `READ_ONLY`
    /// for read-only data.
    #[cfg(feature = "pyo3")]
    fn into_capsule_versioned<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>>
    where
        Self: Sized + Send + 'static,
    {
        let mt = self.into_managed_tensor_versioned()?;
        crate::pyo3_glue::capsule::versioned_capsule(py, mt)
    }
}
