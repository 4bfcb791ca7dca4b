//! [`IntoDLPack`]: a Rust value that vouches for its memory and keeps the exported tensor alive.

use crate::ffi::DLPACK_FLAG_BITMASK_READ_ONLY;
use crate::safe::{self, TensorInfo};

#[cfg(feature = "pyo3")]
use pyo3::{types::PyCapsule, Bound, PyResult, Python};

/// A Rust value whose memory can be exported as a DLPack tensor that keeps the value alive.
///
/// Implement [`IntoDLPack::tensor_info`] (and [`IntoDLPack::is_read_only`] if consumers must not
/// write); `#[derive(IntoDLPack)]` and [`safe::Export`] do it without `unsafe`.
///
/// # Safety
///
/// For every value:
/// - `tensor_info` describes initialised memory (on its `device`) that the value keeps valid and
///   in place while it lives, even when moved: a `Vec`'s heap buffer qualifies; an inline array
///   field, or memory something else owns, does not;
/// - unless `is_read_only` is true, consumers may write that memory while they hold the export:
///   the pointer carries write permission and nothing relies on the memory staying unchanged
///   (except Rust reads of a `#[pyclass]` through `&self`, which the borrow registry covers);
/// - `rust_access_registered` is true only if all other Rust access to the memory holds a
///   registered [borrow](crate::safe#the-borrow-registry) of the bytes it touches for the whole
///   access (shared to read, exclusive to write), as a [`safe::SharedMut`]'s guards do;
/// - the methods answer the same for the same value every time;
/// - `stream_order`, if given, orders a consumer's stream after the work pending on the memory;
/// - the hidden methods (only the derive overrides them) agree with `tensor_info`: `__data_ptr`
///   returns its `data`, `__tensor_info_with_extent` its answer with `Some(e)` only where
///   `info.extent()` is `Ok(e)` (an export trusts that extent without validating).
///
/// ```
/// use dlpack_rs::safe::{cpu_device, dtype_f32, TensorInfo};
/// use dlpack_rs::IntoDLPack;
///
/// struct MyTensor(Vec<f32>);
///
/// // SAFETY: the Vec's heap buffer holds `len` f32s, stays in place when the Vec moves, and
/// // `as_ptr` takes its pointer without a reference to the elements.
/// unsafe impl IntoDLPack for MyTensor {
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
pub unsafe trait IntoDLPack {
    /// Describes the memory to export: pointer, device, dtype, shape, strides, byte offset.
    fn tensor_info(&self) -> TensorInfo;

    /// Whether consumers must not write the memory: its exports are flagged `READ_ONLY`.
    fn is_read_only(&self) -> bool {
        false
    }

    /// Whether every other Rust access to the memory holds a registry borrow (else exports take one).
    fn rust_access_registered(&self) -> bool {
        false
    }

    /// Whether a legacy request shares read-only data, not copies: **trusts the consumer** (SAFETY.md).
    fn share_read_only_legacy(&self) -> bool {
        false
    }

    /// For device data: what orders a consumer's stream after pending work (`None`: none).
    fn stream_order(&self) -> Option<alloc::sync::Arc<dyn safe::StreamOrder>> {
        None
    }

    /// [`IntoDLPack::tensor_info`] with its extent if validated. Not an API: only the derive.
    #[doc(hidden)]
    #[allow(clippy::type_complexity)]
    fn __tensor_info_with_extent(
        &self,
    ) -> Result<(TensorInfo, Option<crate::safe::layout::Extent>), safe::Error> {
        Ok((self.tensor_info(), None))
    }

    /// `tensor_info().data` alone. Not an API: the derive overrides it.
    #[doc(hidden)]
    fn __data_ptr(&self) -> *mut core::ffi::c_void {
        self.tensor_info().data
    }

    /// Moves `self` into a legacy managed tensor; [`safe::Error::ReadOnly`] for read-only data.
    fn into_managed_tensor(self) -> Result<safe::ManagedTensor, safe::Error>
    where
        Self: Sized + Send + 'static,
    {
        if self.is_read_only() {
            return Err(safe::Error::ReadOnly);
        }
        pack_self::<crate::ffi::DLManagedTensor, Self>(self)
    }

    /// Moves `self` into a versioned (DLPack 1.3) managed tensor whose deleter drops it.
    fn into_managed_tensor_versioned(self) -> Result<safe::ManagedTensorVersioned, safe::Error>
    where
        Self: Sized + Send + 'static,
    {
        pack_self::<crate::ffi::DLManagedTensorVersioned, Self>(self)
    }

    /// Moves `self` into a legacy `"dltensor"` capsule; `BufferError` for read-only data.
    #[cfg(feature = "pyo3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
    fn into_capsule<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>>
    where
        Self: Sized + Send + 'static,
    {
        crate::pyo3_glue::runtime::capsule::into_capsule(py, self.into_managed_tensor()?)
    }

    /// Moves `self` into a `"dltensor_versioned"` capsule (DLPack 1.3).
    #[cfg(feature = "pyo3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
    fn into_capsule_versioned<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>>
    where
        Self: Sized + Send + 'static,
    {
        crate::pyo3_glue::runtime::capsule::into_capsule(py, self.into_managed_tensor_versioned()?)
    }
}

/// Exports the elements as a 1-D tensor, writable and holding no borrow: Rust edits them under
/// [`SharedMut::write`](safe::SharedMut::write) while consumers hold views (`bool`: read-only,
/// holding a shared borrow, so `write` is refused while the export lives).
///
/// ```
/// use dlpack_rs::safe::SharedMut;
/// use dlpack_rs::IntoDLPack;
///
/// let pixels = SharedMut::from_slice(&[1.0f32, 2.0])?;
/// let mut exported = pixels.clone().into_managed_tensor_versioned()?;
/// pixels.write()?[0] = 5.0; // the export sees the edit
/// assert_eq!(*exported.as_slice::<f32>()?, [5.0, 2.0]);
/// let consumer_view = exported.as_mut_slice::<f32>()?;
/// assert!(pixels.write().is_err()); // refused while the import's mutable view lives
/// drop(consumer_view);
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
// SAFETY: `len` initialised, writable elements kept in place by every clone, reached by Rust only
// through registry-borrowing guards. `bool` is read-only: a consumer could write an invalid byte.
unsafe impl<T: safe::Element> IntoDLPack for safe::SharedMut<T> {
    fn tensor_info(&self) -> TensorInfo {
        TensorInfo::contiguous(
            safe::Buffer::data_ptr(self).cast(),
            safe::cpu_device(),
            T::DTYPE,
            alloc::vec![self.len() as i64],
        )
    }

    fn is_read_only(&self) -> bool {
        !T::ANY_BIT_PATTERN
    }

    fn rust_access_registered(&self) -> bool {
        true
    }
}

/// `value` packed as its own keepalive, flagged `READ_ONLY` if read-only.
fn pack_self<M: safe::PackAs, T: IntoDLPack + Send + 'static>(
    value: T,
) -> Result<safe::Managed<M>, safe::Error> {
    let flags = if value.is_read_only() {
        DLPACK_FLAG_BITMASK_READ_ONLY
    } else {
        0
    };
    let (info, _) = value.__tensor_info_with_extent()?;
    // SAFETY: the trait's contract: `info` describes memory `value` keeps valid and in place,
    // writable unless flagged read-only. The pointer is re-read in the keepalive's final place:
    // one taken before the move could carry the provenance of a borrow the move ended.
    unsafe {
        safe::pack_owned::<M, T>(
            value,
            info,
            flags,
            safe::Readers::ExportOnly,
            Some(|value: &mut T| value.__data_ptr()),
        )
    }
}

#[cfg(feature = "ndarray")]
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
mod ndarray_impls {
    use core::ffi::c_void;

    use ndarray::{ArcArray, Array, ArrayBase, Data, Dimension};

    use super::IntoDLPack;
    use crate::safe::{cpu_device, Element, TensorInfo};

    fn array_info<A: Element, S: Data<Elem = A>, D: Dimension>(
        array: &ArrayBase<S, D>,
    ) -> TensorInfo {
        TensorInfo::strided(
            array.as_ptr().cast_mut().cast::<c_void>(),
            cpu_device(),
            A::DTYPE,
            array.shape().iter().map(|&d| d as i64).collect(),
            array.strides().iter().map(|&s| s as i64).collect(),
        )
    }

    /// Exports the array with its own shape and strides; the array is the keepalive.
    // SAFETY: an `Array` uniquely owns its elements in one heap allocation that does not move
    // with it, addressed only by its shape and strides. `as_ptr` takes no reference.
    unsafe impl<A: Element, D: Dimension> IntoDLPack for Array<A, D> {
        fn tensor_info(&self) -> TensorInfo {
            array_info(self)
        }
    }

    /// Exports the array as it is; read-only unless it is the only owner of its data.
    // SAFETY: as for `Array`. Shared data exports read-only, under a shared borrow until the
    // deleter; copy-on-write keeps other owners from writing. A unique one moved in stays unique.
    unsafe impl<A: Element, D: Dimension> IntoDLPack for ArcArray<A, D> {
        fn tensor_info(&self) -> TensorInfo {
            array_info(self)
        }

        fn is_read_only(&self) -> bool {
            // `is_unique` loads the count relaxed: the fence orders a dropped owner's reads on
            // another thread before every write made after this answer.
            let unique = self.is_unique();
            if unique {
                core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire);
            }
            !unique
        }
    }
}

/// The `#[dlpack(data)]` field a mutable `#[pyclass]` export clones to keep the memory alive.
///
/// # Safety
///
/// Every byte [`IntoDLPack::tensor_info`] describes lies in `data_field()`'s buffer, on its
/// device (what the derive's `within_buffer_extent` checks).
#[doc(hidden)]
pub unsafe trait DerivedData: IntoDLPack {
    /// The type of the `#[dlpack(data)]` field.
    type Data: safe::Buffer;
    /// The `#[dlpack(data)]` field.
    fn data_field(&self) -> &Self::Data;
}
