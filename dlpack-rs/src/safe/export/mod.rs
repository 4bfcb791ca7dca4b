//! The safe export route: [`Export`] turns an owned [`Buffer`] and a checked shape into a managed
//! tensor, with no raw pointer and no `unsafe`.

pub(super) mod aligned;
pub(super) mod block;
pub(super) mod buffer;
pub(super) mod copy;
pub(super) mod pack;
pub(super) mod shared_mut;
pub(super) mod tensor_info;

use alloc::vec::Vec;
use core::ffi::c_void;

use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY};
use crate::safe::export::buffer::{read_ptr, to_i64s, write_ptr};
use crate::safe::export::pack::pack_validated;
use crate::safe::export::tensor_info::Validated;
use crate::safe::import::{ManagedTensor, ManagedTensorVersioned};
use crate::safe::{Buffer, Dim, Element, Error, Readers, TensorInfo};

/// A fully safe export of an owned [`Buffer`]: no raw pointer, no `unsafe`. The element type
/// decides the dtype; shape and strides are checked against the buffer's length so that no
/// consumer can be told to read outside it.
///
/// ```
/// use dlpack_rs::safe::Export;
///
/// let t = Export::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).shape(&[2, 3]).versioned()?;
/// assert_eq!(t.shape(), &[2, 3]);
/// assert_eq!(t.as_slice::<f32>()?, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
///
/// // Transposed view of the same buffer.
/// let t = Export::new(vec![1u8, 2, 3, 4, 5, 6]).shape(&[3, 2]).strides(&[1, 3]).legacy()?;
/// assert!(!t.is_contiguous());
///
/// // Hand it to a consumer as a raw pointer; the consumer's call to the deleter frees it.
/// let raw = t.into_raw();
/// unsafe { ((*raw).deleter.unwrap())(raw) };
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
#[derive(Debug)]
pub struct Export<B> {
    buffer: B,
    shape: Result<Option<Vec<i64>>, Error>,
    strides: Result<Option<Vec<i64>>, Error>,
    read_only: bool,
}

impl<B: Buffer + Send + 'static> Export<B> {
    /// Starts an export of `buffer`, by default one-dimensional over all its elements.
    pub fn new(buffer: B) -> Self {
        Export {
            buffer,
            shape: Ok(None),
            strides: Ok(None),
            read_only: false,
        }
    }

    /// Sets the shape.
    pub fn shape<D: Dim>(mut self, shape: &[D]) -> Self {
        self.shape = to_i64s(shape).map(Some);
        self
    }

    /// Sets the strides, in elements (negative strides address elements before the first).
    pub fn strides<D: Dim>(mut self, strides: &[D]) -> Self {
        self.strides = to_i64s(strides).map(Some);
        self
    }

    /// Marks the export read-only even if the buffer is writable.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// The buffer's [`Buffer::stream_order`] (`None` for memory with no pending device work),
    /// for a holder of the export that outlives the builder (`DLPackTensor::from_export` keeps
    /// it for `__dlpack__(stream=...)`).
    ///
    /// ```
    /// use dlpack_rs::safe::Export;
    /// assert!(Export::new(vec![1.0f32]).stream_order().is_none());
    /// ```
    pub fn stream_order(&self) -> Option<alloc::sync::Arc<dyn crate::safe::StreamOrder>> {
        self.buffer.stream_order()
    }

    /// The buffer, its validated metadata (validated once: the pack below trusts it) and the
    /// export's flags.
    fn into_parts(self) -> Result<(B, Validated, u64), Error> {
        let len = self.buffer.num_elements();
        let shape = match self.shape? {
            Some(shape) => shape,
            None => alloc::vec![i64::try_from(len).map_err(|_| Error::Overflow)?],
        };
        let strides = self.strides?;
        let data = self.buffer.data_ptr().cast::<c_void>();
        let info = TensorInfo {
            data,
            // The buffer's own device: a view of the result is then refused unless the memory
            // is host-accessible.
            device: self.buffer.device(),
            dtype: B::Elem::DTYPE,
            shape,
            strides,
            byte_offset: 0,
        };
        let info = Validated::new(info)?;
        let extent = info.extent();
        // Every addressed element must be inside the buffer.
        if extent.numel != 0 && (extent.min < 0 || extent.max as u64 >= len as u64) {
            return Err(Error::OutOfBounds {
                len,
                min: extent.min,
                max: extent.max,
            });
        }
        let read_only = self.read_only || !self.buffer.is_writable();
        let flags = if read_only {
            DLPACK_FLAG_BITMASK_READ_ONLY
        } else {
            0
        };
        Ok((self.buffer, info, flags))
    }

    /// Builds a versioned managed tensor (DLPack 1.3, `READ_ONLY` set when the buffer or the
    /// builder says so).
    pub fn versioned(self) -> Result<ManagedTensorVersioned, Error> {
        let (buffer, info, flags) = self.into_parts()?;
        let data_of: fn(&mut B) -> *mut c_void = if flags & DLPACK_FLAG_BITMASK_READ_ONLY == 0 {
            write_ptr::<B>
        } else {
            read_ptr::<B>
        };
        // Through `data_ptr_mut` for a writable export (a buffer that says `is_writable` is
        // owned by the export alone: nothing else reaches its elements), `data_ptr` for a
        // read-only one (other owners may read it; the block holds a shared borrow of it).
        // SAFETY: `into_parts` checked that the layout stays inside the buffer, which the
        // `Buffer` contract keeps valid and in place while the keepalive (the buffer) lives.
        unsafe {
            pack_validated::<DLManagedTensorVersioned, _>(
                buffer,
                info,
                flags,
                Readers::ExportOnly,
                Some(data_of),
            )
        }
    }

    /// Builds a legacy managed tensor. A read-only export cannot be legacy (the legacy struct
    /// has no way to say so): [`Error::ReadOnly`].
    pub fn legacy(self) -> Result<ManagedTensor, Error> {
        let (buffer, info, flags) = self.into_parts()?;
        if flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0 {
            return Err(Error::ReadOnly);
        }
        // SAFETY: as in `versioned`; a legacy export is always writable.
        unsafe {
            pack_validated::<DLManagedTensor, _>(
                buffer,
                info,
                0,
                Readers::ExportOnly,
                Some(write_ptr::<B>),
            )
        }
    }
}
