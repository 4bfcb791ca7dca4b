//! Data narrower than any Rust type: [`Packing`], packed views ([`PackedSlice`]) and exports
//! ([`PackedExport`]).
//!
//! DLPack packs sub-byte data little bit-endian: value `i` (row-major, lanes in order) is bits
//! `i * bits .. (i + 1) * bits` of the data, which takes `ceil(numel * bits * lanes / 8)` bytes:
//!
//! | producer | dtype | bits x lanes | bytes for 5 elements |
//! |---|---|---|---|
//! | jax `float4_e2m1fn` | [`DLDataType::FLOAT4_E2M1FN`] | 4 x 1: two elements per byte | 3 |
//! | torch `float4_e2m1fn_x2` | [`DLDataType::FLOAT4_E2M1FN_X2`] | 4 x 2: one element (two values) per byte | 5 |

use alloc::vec::Vec;
use core::ffi::c_void;

use crate::ffi::{DLDataType, DLManagedTensor, DLManagedTensorVersioned};
use crate::safe::borrow::guard::ReadGuard;
use crate::safe::borrow::BorrowToken;
use crate::safe::export::buffer::to_i64s;
use crate::safe::export::pack_buffer;
use crate::safe::import::{Kind, Managed, ManagedTensor, ManagedTensorVersioned};
use crate::safe::layout::tensor_info::Validated;
use crate::safe::{validate_dtype, Buffer, Error, TensorInfo};

/// How the values of a dtype of at most 8 bits sit in bytes.
///
/// ```
/// use dlpack_rs::ffi::DLDataType;
/// use dlpack_rs::safe::Packing;
///
/// let jax = Packing::of(DLDataType::FLOAT4_E2M1FN)?; // 4 bits x 1 lane
/// assert_eq!(jax.nbytes(5), Some(3)); // two elements per byte, the last half empty
/// let torch = Packing::of(DLDataType::FLOAT4_E2M1FN_X2)?; // 4 bits x 2 lanes
/// assert_eq!(torch.nbytes(5), Some(5)); // one byte (two values) per element
///
/// let bytes = jax.pack(&[1, 2, 3, 4, 5]);
/// assert_eq!(bytes, [0x21, 0x43, 0x05]); // value 0 in the low nibble
/// assert_eq!(jax.value(&bytes, 4), Some(5));
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Packing {
    dtype: DLDataType,
}

impl Packing {
    /// The packing of a valid `dtype` of at most 8 bits ([`Error::NotPacked`] if wider).
    pub fn of(dtype: DLDataType) -> Result<Self, Error> {
        validate_dtype(dtype)?;
        if dtype.bits > 8 {
            return Err(Error::NotPacked(dtype));
        }
        Ok(Packing { dtype })
    }

    /// The dtype.
    pub const fn dtype(&self) -> DLDataType {
        self.dtype
    }

    /// Bits of one value (DLPack's `bits`).
    pub const fn value_bits(&self) -> u32 {
        self.dtype.bits as u32
    }

    /// Values per element (DLPack's `lanes`: 2 for torch's `float4_e2m1fn_x2`).
    pub const fn lanes(&self) -> usize {
        self.dtype.lanes as usize
    }

    /// Bits of one element (`bits * lanes`).
    pub const fn element_bits(&self) -> u64 {
        crate::safe::element_bits(self.dtype)
    }

    /// Bytes `numel` packed elements occupy, `None` on overflow.
    pub fn nbytes(&self, numel: usize) -> Option<usize> {
        let bits = (numel as u128).checked_mul(self.element_bits() as u128)?;
        usize::try_from(bits.div_ceil(8)).ok()
    }

    /// The most whole elements `nbytes` bytes hold.
    pub fn elements_in(&self, nbytes: usize) -> usize {
        ((nbytes as u128 * 8) / self.element_bits() as u128) as usize
    }

    /// The bit mask of one value (`0x0f` for 4 bits).
    const fn mask(&self) -> u8 {
        (((1u16) << self.dtype.bits) - 1) as u8
    }

    /// Value `i` of packed `bytes`, in its low bits; `None` when `bytes` does not hold it.
    pub fn value(&self, bytes: &[u8], i: usize) -> Option<u8> {
        let bit = i.checked_mul(self.dtype.bits as usize)?;
        let (byte, shift) = (bit / 8, bit % 8);
        let low = *bytes.get(byte)? as u16;
        let bits = self.dtype.bits as usize;
        let word = if shift + bits > 8 {
            low | (*bytes.get(byte + 1)? as u16) << 8
        } else {
            low
        };
        Some((word >> shift) as u8 & self.mask())
    }

    /// Sets value `i` of packed `bytes` to the low bits of `value`; false if out of range.
    pub fn set_value(&self, bytes: &mut [u8], i: usize, value: u8) -> bool {
        // `value` checks that `bytes` holds value `i` (so `i * bits` does not overflow).
        let Some(old) = self.value(bytes, i) else {
            return false;
        };
        let bits = self.dtype.bits as usize;
        let (byte, shift) = (i * bits / 8, i * bits % 8);
        // The bits that change, in place: XOR turns the old value into the new one.
        let delta = ((old ^ (value & self.mask())) as u16) << shift;
        bytes[byte] ^= delta as u8;
        if shift + bits > 8 {
            bytes[byte + 1] ^= (delta >> 8) as u8;
        }
        true
    }

    /// Packs the low bits of `values`; missing lanes and trailing bits are zero.
    pub fn pack(&self, values: &[u8]) -> Vec<u8> {
        let numel = values.len().div_ceil(self.lanes());
        let mut bytes = alloc::vec![0u8; self.nbytes(numel).unwrap_or(0)];
        for (i, &v) in values.iter().enumerate() {
            self.set_value(&mut bytes, i, v);
        }
        bytes
    }
}

/// A shared view of a contiguous tensor's packed bytes ([`Managed::as_packed`]).
pub struct PackedSlice<'a> {
    bytes: ReadGuard<'a, &'a [u8]>,
    packing: Packing,
    numel: usize,
}

impl core::fmt::Debug for PackedSlice<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PackedSlice")
            .field("dtype", &format_args!("{}", self.packing.dtype.name()))
            .field("numel", &self.numel)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl PackedSlice<'_> {
    /// The packed bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// How the values sit in [`PackedSlice::bytes`].
    pub fn packing(&self) -> Packing {
        self.packing
    }

    /// Number of elements (the tensor's `numel`).
    pub fn numel(&self) -> usize {
        self.numel
    }

    /// Number of values: `numel * lanes`.
    pub fn value_count(&self) -> usize {
        self.numel * self.packing.lanes()
    }

    /// Value `i` (in its low bits), `None` past the last one.
    pub fn value(&self, i: usize) -> Option<u8> {
        if i >= self.value_count() {
            return None;
        }
        self.packing.value(&self.bytes, i)
    }

    /// Every value in order, each in the low bits of a byte.
    pub fn values(&self) -> impl Iterator<Item = u8> + '_ {
        (0..self.value_count()).filter_map(move |i| self.packing.value(&self.bytes, i))
    }
}

impl<K: Kind> Managed<K> {
    /// The packed bytes of a contiguous host tensor of at most 8 bits per value ([`Error::NotPacked`]
    /// for wider dtypes), borrowed as [`Managed::as_slice`] is.
    ///
    /// ```
    /// use dlpack_rs::ffi::DLDataType;
    /// use dlpack_rs::safe::PackedExport;
    ///
    /// let t = PackedExport::new(vec![0x21u8, 0x43, 0x05], DLDataType::FLOAT4_E2M1FN)
    ///     .shape(&[5])
    ///     .versioned()?;
    /// assert_eq!(t.nbytes(), 3);
    /// let p = t.as_packed()?;
    /// assert_eq!(p.values().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    /// # Ok::<(), dlpack_rs::safe::Error>(())
    /// ```
    pub fn as_packed(&self) -> Result<PackedSlice<'_>, Error> {
        let packing = Packing::of(self.dtype())?;
        Ok(PackedSlice {
            bytes: self.contiguous_bytes()?,
            packing,
            numel: self.numel(),
        })
    }

    /// The bytes of a C-contiguous host tensor (any dtype), borrowed shared.
    pub(crate) fn contiguous_bytes(&self) -> Result<ReadGuard<'_, &[u8]>, Error> {
        crate::safe::import::views::host_viewable(self.device())?;
        if !self.is_contiguous() {
            return Err(Error::NotContiguous);
        }
        if self.numel() == 0 {
            return Ok(ReadGuard::new(&[], BorrowToken::EMPTY));
        }
        let ptr = self.data_ptr().cast::<u8>();
        if ptr.is_null() {
            return Err(Error::NullData);
        }
        let token = self.borrow_addressed(false)?;
        // SAFETY: non-NULL host memory, `nbytes` bytes validated in bounds, alive while `self`
        // is, any byte a valid u8, and borrowed (shared) above until the guard drops.
        let bytes = unsafe { core::slice::from_raw_parts(ptr, self.nbytes()) };
        Ok(ReadGuard::new(bytes, token))
    }
}

/// A compact row-major export of packed bytes of an explicit dtype (FP4, FP6, FP8 without a Rust
/// type, ...); the byte count must be what the shape needs ([`Error::PackedLength`]).
///
/// ```
/// use dlpack_rs::ffi::DLDataType;
/// use dlpack_rs::safe::PackedExport;
///
/// let t = PackedExport::new(vec![0x21u8, 0x43, 0x65], DLDataType::FLOAT4_E2M1FN_X2).versioned()?;
/// assert_eq!(t.shape(), &[3]);
/// assert_eq!(t.dtype().name().to_string(), "float4_e2m1fn_x2");
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
#[derive(Debug)]
pub struct PackedExport<B> {
    buffer: B,
    dtype: DLDataType,
    shape: Result<Option<Vec<i64>>, Error>,
    read_only: bool,
}

impl<B: Buffer<Elem = u8> + Send + 'static> PackedExport<B> {
    /// Exports `buffer` as `dtype`, by default 1-D over the whole elements it holds.
    pub fn new(buffer: B, dtype: DLDataType) -> Self {
        PackedExport {
            buffer,
            dtype,
            shape: Ok(None),
            read_only: false,
        }
    }

    /// Sets the shape (in elements).
    pub fn shape<D: Copy + TryInto<i64>>(mut self, shape: &[D]) -> Self {
        self.shape = to_i64s(shape).map(Some);
        self
    }

    /// Marks the export read-only even if the buffer is writable.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// The buffer, its validated metadata and whether the builder asked for read-only.
    fn into_parts(self) -> Result<(B, Validated, bool), Error> {
        let packing = Packing::of(self.dtype)?;
        let len = self.buffer.num_elements();
        let shape = match self.shape? {
            Some(shape) => shape,
            None => {
                let numel = packing.elements_in(len);
                alloc::vec![i64::try_from(numel).map_err(|_| Error::Overflow)?]
            }
        };
        let info = TensorInfo {
            data: self.buffer.data_ptr().cast::<c_void>(),
            device: self.buffer.device(),
            dtype: self.dtype,
            shape,
            strides: None,
            byte_offset: 0,
        };
        let info = Validated::new(info)?;
        let numel = info.extent().numel;
        let needed = packing.nbytes(numel).ok_or(Error::Overflow)?;
        if needed != len {
            return Err(Error::PackedLength {
                bytes: len,
                numel,
                needed,
            });
        }
        Ok((self.buffer, info, self.read_only))
    }

    /// Builds a versioned managed tensor (`READ_ONLY` when the buffer or builder says so).
    pub fn versioned(self) -> Result<ManagedTensorVersioned, Error> {
        let (buffer, info, read_only) = self.into_parts()?;
        // SAFETY: `into_parts` checked the layout covers exactly the buffer's bytes.
        unsafe { pack_buffer::<DLManagedTensorVersioned, B>(buffer, info, read_only) }
    }

    /// Builds a legacy managed tensor; [`Error::ReadOnly`] for a read-only export.
    pub fn legacy(self) -> Result<ManagedTensor, Error> {
        let (buffer, info, read_only) = self.into_parts()?;
        // SAFETY: as in `versioned`.
        unsafe { pack_buffer::<DLManagedTensor, B>(buffer, info, read_only) }
    }
}
