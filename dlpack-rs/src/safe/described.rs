//! A tensor someone else keeps alive, viewed without owning it: [`Described`] is a non-owning
//! `DLTensor` (what the exchange API's `dltensor_from_py_object_no_sync` fills) validated once,
//! its shape and strides copied into storage of its own, with the owner's borrow-checked slice.

use alloc::boxed::Box;
use core::ffi::c_void;

use super::borrow::BorrowToken;
use super::managed::{contiguous_slice_parts, raw_shape, raw_strides, validate};
use super::{Element, Error};
use crate::ffi::{DLDataType, DLDevice, DLTensor};

/// Dimensions kept without a heap allocation (shape and strides side by side).
const INLINE: usize = 4;

/// Shape then strides, `ndim` of each.
enum Dims {
    Inline([i64; 2 * INLINE]),
    Heap(Box<[i64]>),
}

/// A validated copy of a non-owning `DLTensor`'s metadata. It owns nothing: whoever made it
/// keeps the memory alive (the Python object, for an exchange-table view) for as long as a
/// pointer from [`Described::slice_parts`] is used.
#[allow(dead_code)] // used by the Python glue
pub(crate) struct Described {
    /// The first element (`data + byte_offset`).
    first: *mut c_void,
    dtype: DLDataType,
    device: DLDevice,
    ndim: usize,
    /// Whether the producer gave strides (NULL: compact row-major).
    strided: bool,
    dims: Dims,
}

#[allow(dead_code)] // used by the Python glue
impl Described {
    /// Validates `t` (as an owner validates a producer's tensor) and copies its metadata.
    ///
    /// # Safety
    ///
    /// `t.shape` and `t.strides`, when non-NULL and `t.ndim > 0`, point at `t.ndim` readable
    /// `i64`s (the DLPack contract).
    pub(crate) unsafe fn new(t: &DLTensor) -> Result<Self, Error> {
        // SAFETY: forwarded from this function's contract.
        unsafe { validate(t) }?;
        // SAFETY: validated: ndim is in range and the pointers are readable (the contract).
        let (shape, strides) = unsafe { (raw_shape(t), raw_strides(t)) };
        let ndim = shape.len();
        let dims = if ndim <= INLINE {
            let mut dims = [0i64; 2 * INLINE];
            dims[..ndim].copy_from_slice(shape);
            if let Some(strides) = strides {
                dims[ndim..2 * ndim].copy_from_slice(strides);
            }
            Dims::Inline(dims)
        } else {
            let mut dims = alloc::vec![0i64; 2 * ndim];
            dims[..ndim].copy_from_slice(shape);
            if let Some(strides) = strides {
                dims[ndim..].copy_from_slice(strides);
            }
            Dims::Heap(dims.into_boxed_slice())
        };
        let first = if t.data.is_null() {
            core::ptr::null_mut()
        } else {
            // Validated: the offset fits in isize; never dereferenced here.
            t.data
                .cast::<u8>()
                .wrapping_add(t.byte_offset as usize)
                .cast()
        };
        Ok(Described {
            first,
            dtype: t.dtype,
            device: t.device,
            ndim,
            strided: strides.is_some(),
            dims,
        })
    }

    fn dims(&self) -> &[i64] {
        match &self.dims {
            Dims::Inline(d) => &d[..2 * self.ndim],
            Dims::Heap(d) => d,
        }
    }

    /// Extent of each dimension.
    pub(crate) fn shape(&self) -> &[i64] {
        &self.dims()[..self.ndim]
    }

    /// Strides in elements as the producer gave them (`None`: compact row-major).
    pub(crate) fn raw_strides(&self) -> Option<&[i64]> {
        self.strided.then(|| &self.dims()[self.ndim..])
    }

    /// The element type.
    pub(crate) fn dtype(&self) -> DLDataType {
        self.dtype
    }

    /// Where the memory lives.
    pub(crate) fn device(&self) -> DLDevice {
        self.device
    }

    /// The address of the first element (NULL for a NULL data pointer).
    pub(crate) fn data_ptr(&self) -> *mut c_void {
        self.first
    }

    /// As `Managed::slice_parts`: checks that a slice of `T` over the tensor is sound and
    /// borrows it in the registry, returning its first element, its length and the borrow.
    ///
    /// # Safety
    ///
    /// The memory `self` describes stays alive and in place while the returned pointer is used.
    pub(crate) unsafe fn slice_parts<T: Element>(
        &self,
        exclusive: bool,
    ) -> Result<(*mut T, usize, BorrowToken), Error> {
        // SAFETY: validated in `new`; alive by this function's contract.
        unsafe {
            contiguous_slice_parts::<T>(
                self.first,
                self.shape(),
                self.raw_strides(),
                self.dtype,
                self.device,
                exclusive,
                Ok,
            )
        }
    }

    /// As `Managed::as_array`'s checks: the layout of an ndarray view of `T` over the tensor
    /// (any strides) and the shared borrow of every byte it addresses.
    ///
    /// # Safety
    ///
    /// The memory `self` describes stays alive and in place while a view made from the
    /// returned layout is used.
    #[cfg(feature = "ndarray")]
    pub(crate) unsafe fn strided_parts<T: Element>(
        &self,
    ) -> Result<(super::ndarray::Normalized<T>, BorrowToken), Error> {
        let strides = match self.raw_strides() {
            Some(s) => alloc::borrow::Cow::Borrowed(s),
            None => alloc::borrow::Cow::Owned(super::compact_strides(self.shape())),
        };
        // SAFETY: validated in `new`; alive by this function's contract.
        unsafe {
            super::ndarray::strided_parts::<T>(
                self.first,
                self.shape(),
                &strides,
                self.dtype,
                self.device,
                false,
                Ok,
            )
        }
    }
}

// SAFETY: plain metadata and an address; the memory it describes is reached only through
// `slice_parts`, whose callers uphold its contract.
unsafe impl Send for Described {}
// SAFETY: as above; `&Described` reads only the copied metadata.
unsafe impl Sync for Described {}
