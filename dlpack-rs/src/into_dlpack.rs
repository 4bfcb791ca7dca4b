//! The export trait: a Rust value that vouches for the memory it describes as a DLPack tensor
//! and becomes the keepalive of that tensor ([`IntoDLPack`], and its ndarray implementations).

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
/// This is where a raw pointer starts being trusted, so the trait is `unsafe` to implement:
/// `#[derive(IntoDLPack)]` and [`safe::Export`] are the routes that need no `unsafe`, because
/// they check what they describe against the buffer they own.
///
/// # Safety
///
/// In short, for a producer whose Rust code never touches the exported memory while an export
/// may live (the common case: a buffer the value owns, handed over whole): the memory
/// `tensor_info` describes is initialised, owned by the value, stays where it is when the value
/// moves and lives as long as the value; it may be written by consumers unless `is_read_only`
/// answers true; and the methods answer the same for the same value every time. The default
/// `rust_access_registered` (false) and `stream_order` (none) need no promise then.
///
/// In full, an implementation promises, for every value:
/// - `tensor_info` describes initialised memory (on `tensor_info().device`) that the value
///   itself keeps valid, and in place, for as long as it lives, even when the value is moved
///   (heap memory owned by the value, such as a `Vec`'s buffer, qualifies; an inline array field
///   does not, and neither does memory owned by something else, such as another managed
///   tensor's);
/// - unless `is_read_only` returns true, consumers may write that memory while they hold the
///   export: the pointer must carry write permission and nothing may rely on the memory staying
///   unchanged (Rust code of a `#[pyclass]` reading it through `&self` is the exception the
///   borrow registry covers, see SAFETY.md);
/// - `rust_access_registered` returns true only if Rust code reaches the described memory,
///   other than through the export, only under a registered [borrow](crate::safe#the-borrow-registry) of the
///   bytes it touches, held for the whole access (shared to read, exclusive to write): the memory
///   of a [`safe::SharedMut`], read and written through its guards;
/// - the methods answer the same for the same value every time;
/// - `stream_order`, if given, orders a consumer's stream after the device work pending on that
///   memory (a wrong order is a race on device memory, not on memory this crate reads);
/// - the hidden `__tensor_info_with_extent` (left alone by hand-written implementations: only
///   the derive overrides it) returns `tensor_info()`'s answer, with `Some(e)` only where that
///   `info.extent()` is `Ok(e)`: an export trusts that extent instead of validating again.
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

    /// Whether consumers must not write to the memory. Read-only data is exported with the
    /// `READ_ONLY` flag and cannot be exported as a legacy (unversioned) tensor.
    fn is_read_only(&self) -> bool {
        false
    }

    /// Whether every access of Rust code to the memory (other than through the export) holds a
    /// registry borrow, as [`safe::SharedMut`]'s guards do (see the trait's safety section).
    /// Then an export that is not read-only holds no borrow of its own, and Rust may edit the
    /// memory in place, under an exclusive guard, while consumers hold views of it (the
    /// shared-mutable model). `false` by default: exports that Rust may still read through
    /// `&self` (`export_dlpack_value`, frozen classes) then hold a shared borrow, which refuses
    /// every mutable view of the memory through this crate while they live.
    fn rust_access_registered(&self) -> bool {
        false
    }

    /// Whether a legacy (unversioned) `__dlpack__` request of read-only data with `copy=None`
    /// (or `copy=False`) shares the memory instead of copying it (or refusing). `false` by
    /// default: a legacy capsule cannot say "read-only", so by default such a request (jax's)
    /// gets a copy. `true` is the class author's explicit opt-in to zero-copy legacy exports
    /// (`#[dlpack(legacy_read_only = "share")]` on a derived struct), **trusting the consumer
    /// not to write** the memory: jax never writes its arrays and numpy imports legacy capsules
    /// read-only, but nothing stops a consumer that does. The export still holds a shared
    /// borrow of the bytes, so no mutable view through this crate is granted while it lives;
    /// a consumer's write is a foreign write, outside the model (see SAFETY.md).
    /// Versioned requests are unaffected (they carry `READ_ONLY`).
    fn share_read_only_legacy(&self) -> bool {
        false
    }

    /// For data on a device with streams (CUDA, ROCm): what orders a consumer's stream after
    /// the device work still pending on the memory. `__dlpack__(stream=...)` calls it before it
    /// hands the data over (`stream=None` means the default stream, -1 no synchronisation), as
    /// does this crate's C exchange table, whose `current_work_stream` is the default stream.
    /// `None` (the default) when no device work is pending. Not asked for CPU data.
    fn stream_order(&self) -> Option<alloc::sync::Arc<dyn safe::StreamOrder>> {
        None
    }

    /// [`IntoDLPack::tensor_info`] as every export asks it: with the layout's extent when the
    /// implementation validated it already (the derive's bounds check does), so that an export
    /// need not validate it again, or the error that refuses the export (the derive's: a layout
    /// outside the data field). Not an API: only the derive overrides it, and an override must
    /// return `Some(e)` only where `info.extent()` is `Ok(e)` for the very `info` it returns.
    #[doc(hidden)]
    #[allow(clippy::type_complexity)]
    fn __tensor_info_with_extent(
        &self,
    ) -> Result<(TensorInfo, Option<crate::safe::import::layout::Extent>), safe::Error> {
        Ok((self.tensor_info(), None))
    }

    /// `tensor_info().data`, asked alone. Not an API: the derive overrides it so that an export
    /// asks the layout once (a `Dim` may answer differently each time it is asked).
    #[doc(hidden)]
    fn __data_ptr(&self) -> *mut core::ffi::c_void {
        self.tensor_info().data
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
        let (info, _) = self.__tensor_info_with_extent()?;
        // SAFETY: the trait's contract: `info` describes memory `self` (the keepalive) keeps
        // valid and in place, writable by consumers since `is_read_only` said no; the pointer is
        // taken again from `self` in its final place (`pointer_in_place`).
        unsafe {
            safe::pack_owned::<crate::ffi::DLManagedTensor, _>(
                self,
                info,
                0,
                safe::Readers::ExportOnly,
                Some(pointer_in_place::<Self>),
            )
        }
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
        let (info, _) = self.__tensor_info_with_extent()?;
        // SAFETY: the trait's contract, as in `into_managed_tensor`; read-only memory is
        // flagged so.
        unsafe {
            safe::pack_owned::<crate::ffi::DLManagedTensorVersioned, _>(
                self,
                info,
                flags,
                safe::Readers::ExportOnly,
                Some(pointer_in_place::<Self>),
            )
        }
    }

    /// Moves `self` into a legacy `"dltensor"` capsule (the return value of a legacy
    /// `__dlpack__()`). Raises `BufferError` for read-only data.
    ///
    /// The capsule's destructor calls the deleter only if no consumer took the tensor. For a
    /// managed tensor you already own (an import, a [`safe::Export`]), the free function
    /// [`pyo3_glue::into_capsule`](crate::pyo3_glue::into_capsule) is the door.
    #[cfg(feature = "pyo3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
    fn into_capsule<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>>
    where
        Self: Sized + Send + 'static,
    {
        crate::pyo3_glue::runtime::capsule::into_capsule(py, self.into_managed_tensor()?)
    }

    /// Moves `self` into a `"dltensor_versioned"` capsule (DLPack 1.3), flagged `READ_ONLY`
    /// for read-only data.
    #[cfg(feature = "pyo3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
    fn into_capsule_versioned<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>>
    where
        Self: Sized + Send + 'static,
    {
        crate::pyo3_glue::runtime::capsule::into_capsule(py, self.into_managed_tensor_versioned()?)
    }
}

/// Exports the elements as a 1-D tensor, writable (read-only for `bool`) and holding no borrow:
/// the shared-mutable model, in which Rust edits the memory in place under
/// [`SharedMut::write`](safe::SharedMut::write) while consumers hold views of it. A class whose
/// tensor has another shape describes it in its own `IntoDLPack` (a backing enum, say), taking
/// the pointer from [`safe::Buffer::data_ptr`] and forwarding `rust_access_registered`.
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
// SAFETY: the `Buffer` implementation of `SharedMut`: `data_ptr` points at `num_elements`
// initialised elements in an allocation every clone keeps alive and in place, and carries write
// permission; the 1-D shape covers exactly them. Rust reaches them only through `read` / `write`
// guards, each holding a registry borrow for its whole life: `rust_access_registered`. `bool`
// is exported read-only (a consumer must not write a byte a guard would read as `bool`).
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

/// The data pointer of an export's keepalive asked anew once the value sits in the export's
/// block: a pointer taken before the move could carry the provenance of a borrow the move ended.
fn pointer_in_place<T: IntoDLPack>(value: &mut T) -> *mut core::ffi::c_void {
    value.__data_ptr()
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
    // SAFETY: an `Array` owns its elements in one heap allocation that moving the array does not
    // move; ndarray guarantees its shape and strides address only elements of it. `as_ptr`
    // reads the array's raw pointer (no reference to the elements), and the array owns the data
    // uniquely, so consumer writes touch memory nothing else relies on.
    unsafe impl<A: Element, D: Dimension> IntoDLPack for Array<A, D> {
        fn tensor_info(&self) -> TensorInfo {
            array_info(self)
        }
    }

    /// Exports the array with its own shape and strides; read-only unless this `ArcArray` is
    /// the only owner of its data.
    // SAFETY: as for `Array`. Shared data (other `ArcArray`s may read it) is exported read-only,
    // and every read-only export holds a shared borrow of its bytes until its deleter runs, so no
    // mutable view through this crate (after torch re-exported it writable, say) is granted while
    // the other owners may read; ndarray's copy-on-write keeps those owners from writing while
    // shared. A unique `ArcArray` moved into the export can gain no other owner afterwards, so
    // it is exported writable, with nothing else reaching its elements.
    unsafe impl<A: Element, D: Dimension> IntoDLPack for ArcArray<A, D> {
        fn tensor_info(&self) -> TensorInfo {
            array_info(self)
        }

        fn is_read_only(&self) -> bool {
            // `is_unique` reads the count with a relaxed load (`Arc::strong_count`): an acquire
            // fence after it orders the reads of an owner that another thread dropped before
            // every write a consumer (or a mutable view of the export) makes after this answer.
            let unique = self.is_unique();
            if unique {
                core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire);
            }
            !unique
        }
    }
}

/// What the derive knows about a struct besides its [`IntoDLPack`](crate::IntoDLPack) impl: its
/// data field, which a mutable `#[pyclass]` export clones to keep the memory alive.
///
/// # Safety
///
/// Every byte [`IntoDLPack::tensor_info`](crate::IntoDLPack::tensor_info) describes lies inside
/// `data_field()`'s buffer, on its device (what the derive's `within_buffer_extent` checks).
#[doc(hidden)]
pub unsafe trait DerivedData: IntoDLPack {
    /// The type of the `#[dlpack(data)]` field.
    type Data: safe::Buffer;
    /// The `#[dlpack(data)]` field.
    fn data_field(&self) -> &Self::Data;
}
