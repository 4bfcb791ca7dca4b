//! The safe export route: [`Export`].

pub(super) mod aligned;
pub(super) mod block;
pub(super) mod buffer;
pub(super) mod copy;
pub(super) mod pack;
pub(super) mod shared_mut;

use alloc::vec::Vec;
use core::ffi::c_void;

use crate::ffi::{DLDataType, DLPACK_FLAG_BITMASK_READ_ONLY};
use crate::safe::export::block::{build_validated, PackAs};
use crate::safe::export::buffer::to_i64s;
use crate::safe::import::{Managed, ManagedTensor, ManagedTensorVersioned};
use crate::safe::layout::tensor_info::Validated;
use crate::safe::{Buffer, Element, Error, Packing, Readers, TensorInfo};

/// A safe export of an owned [`Buffer`], its layout checked against the buffer's length.
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
    /// The dtype of packed bytes ([`Export::packed`]), else the element type's.
    packed: Option<DLDataType>,
}

impl<B: Buffer + Send + 'static> Export<B> {
    /// Starts an export of `buffer`, by default one-dimensional over all its elements.
    pub fn new(buffer: B) -> Self {
        Export {
            buffer,
            shape: Ok(None),
            strides: Ok(None),
            read_only: false,
            packed: None,
        }
    }

    /// Sets the extent of each dimension; the layout must stay within the buffer.
    pub fn shape<D: Copy + TryInto<i64>>(mut self, shape: &[D]) -> Self {
        self.shape = to_i64s(shape).map(Some);
        self
    }

    /// Sets the strides, in elements (negative strides address elements before the first).
    pub fn strides<D: Copy + TryInto<i64>>(mut self, strides: &[D]) -> Self {
        self.strides = to_i64s(strides).map(Some);
        self
    }

    /// Marks the export read-only even if the buffer is writable.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// The buffer's [`Buffer::stream_order`], for a holder that outlives the builder.
    pub fn stream_order(&self) -> Option<alloc::sync::Arc<dyn crate::safe::StreamOrder>> {
        self.buffer.stream_order()
    }

    /// Checks the layout against the buffer and packs it as `M`, `READ_ONLY` when the builder or
    /// the buffer says so ([`Error::ReadOnly`] then for a legacy struct).
    fn build<M: PackAs>(self) -> Result<Managed<M>, Error> {
        let elements = self.buffer.num_elements();
        let (dtype, len, packing) = match self.packed {
            Some(dtype) => {
                let packing = Packing::of(dtype)?;
                let bytes = elements * core::mem::size_of::<B::Elem>();
                (dtype, packing.elements_in(bytes), Some((packing, bytes)))
            }
            None => (B::Elem::DTYPE, elements, None),
        };
        let strides = self.strides?;
        if packing.is_some() && strides.is_some() {
            return Err(Error::NotContiguous);
        }
        let shape = match self.shape? {
            Some(shape) => shape,
            None => alloc::vec![i64::try_from(len).map_err(|_| Error::Overflow)?],
        };
        let info = Validated::new(TensorInfo {
            data: self.buffer.data_ptr().cast::<c_void>(),
            device: self.buffer.device(),
            dtype,
            shape,
            strides,
            byte_offset: 0,
        })?;
        let extent = info.extent();
        if let Some((packing, bytes)) = packing {
            let needed = packing.nbytes(extent.numel).ok_or(Error::Overflow)?;
            if needed != bytes {
                return Err(Error::PackedLength {
                    bytes,
                    numel: extent.numel,
                    needed,
                });
            }
        } else if extent.numel != 0 && (extent.min < 0 || extent.max as u64 >= len as u64) {
            return Err(Error::OutOfBounds {
                len,
                min: extent.min,
                max: extent.max,
            });
        }
        let (flags, data_of): (u64, fn(&mut B) -> *mut c_void) =
            if self.read_only || !self.buffer.is_writable() {
                if !M::HAS_FLAGS {
                    return Err(Error::ReadOnly);
                }
                (DLPACK_FLAG_BITMASK_READ_ONLY, |b| b.data_ptr().cast())
            } else {
                (0, |b| b.data_ptr_mut().cast())
            };
        // In place: the `Buffer` contract says dropping the buffer never calls into Python.
        let ptr = build_validated::<M, B>(
            self.buffer,
            info,
            flags,
            Readers::ExportOnly,
            Some(data_of),
            true,
        )?;
        // SAFETY: checked above to address only the buffer's memory, which the `Buffer` contract
        // keeps in place; it is written only through `data_ptr_mut`, whose pointer the export
        // gets only when not flagged `READ_ONLY`. A block of kind `M`, owned by nobody else.
        Ok(unsafe { Managed::from_parts(ptr.cast(), M::HAS_FLAGS) })
    }

    /// Builds a versioned managed tensor (`READ_ONLY` when the buffer or builder says so).
    pub fn versioned(self) -> Result<ManagedTensorVersioned, Error> {
        self.build()
    }

    /// Builds a legacy managed tensor; [`Error::ReadOnly`] for a read-only export.
    pub fn legacy(self) -> Result<ManagedTensor, Error> {
        self.build()
    }
}

impl<B: Buffer<Elem = u8> + Send + 'static> Export<B> {
    /// Exports the bytes as `dtype` of at most 8 bits per value (FP4, FP6, FP8), packed as
    /// [`Packing`] says. The shape counts elements (by default all the bytes hold) and must need
    /// exactly these bytes ([`Error::PackedLength`]). Strides are refused.
    ///
    /// ```
    /// use dlpack_rs::ffi::DLDataType;
    /// use dlpack_rs::safe::Export;
    ///
    /// let t = Export::new(vec![0x21u8, 0x43, 0x65]).packed(DLDataType::FLOAT4_E2M1FN_X2).versioned()?;
    /// assert_eq!(t.shape(), &[3]);
    /// assert_eq!(t.dtype().name().to_string(), "float4_e2m1fn_x2");
    /// # Ok::<(), dlpack_rs::safe::Error>(())
    /// ```
    pub fn packed(mut self, dtype: DLDataType) -> Self {
        self.packed = Some(dtype);
        self
    }
}
