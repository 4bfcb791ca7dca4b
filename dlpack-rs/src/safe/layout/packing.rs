//! [`Packing`]: how the values of a dtype of at most 8 bits sit in bytes.

use alloc::vec::Vec;

use crate::ffi::DLDataType;
use crate::safe::layout::validate_dtype;
use crate::safe::Error;

/// How the values of a dtype of at most 8 bits sit in bytes.
///
/// DLPack packs them little bit-endian: value `i` (row-major, lanes in order) is bits
/// `i * bits .. (i + 1) * bits` of the data, which takes `ceil(numel * bits * lanes / 8)` bytes.
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

    /// The dtype whose values this packing places.
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
        // XOR turns the old value into the new one in place.
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
