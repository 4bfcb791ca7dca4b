//! A tensor's description ([`TensorInfo`](tensor_info::TensorInfo)) and the overflow-checked
//! shape and stride arithmetic that validates it, below the import and export floors.

pub(crate) mod packing;
pub(crate) mod tensor_info;

use alloc::vec::Vec;

use crate::ffi::DLDataType;
use crate::safe::dtype::{dtype_allowed, element_bits};
use crate::safe::{Error, TensorInfo};

/// `InvalidDtype` unless [`dtype_allowed`].
pub(crate) fn validate_dtype(dtype: DLDataType) -> Result<(), Error> {
    if dtype_allowed(dtype) {
        Ok(())
    } else {
        Err(Error::InvalidDtype(dtype))
    }
}

/// What a validated layout addresses (public for the derive's generated code only).
#[doc(hidden)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Number of elements.
    pub numel: usize,
    /// Lowest element index addressed, relative to the first element (0 or negative).
    pub min: i64,
    /// Highest element index addressed, relative to the first element (-1 when empty).
    pub max: i64,
}

/// Validates extents, dtype, addressed bytes (within an `isize`), and non-NULL data unless empty.
pub(crate) fn check(
    shape: &[i64],
    strides: Option<&[i64]>,
    dtype: DLDataType,
    byte_offset: u64,
    data_is_null: bool,
) -> Result<Extent, Error> {
    if shape.len() > TensorInfo::MAX_NDIM {
        return Err(Error::TooManyDims(
            i32::try_from(shape.len()).unwrap_or(i32::MAX),
        ));
    }
    if let Some(strides) = strides {
        if strides.len() != shape.len() {
            return Err(Error::StridesLength {
                shape: shape.len(),
                strides: strides.len(),
            });
        }
    }
    validate_dtype(dtype)?;
    let (mut product, mut overflow, mut empty) = (1usize, false, false);
    for (axis, &extent) in shape.iter().enumerate() {
        if extent < 0 {
            return Err(Error::NegativeDim { axis, extent });
        }
        empty |= extent == 0;
        match product.checked_mul(extent as usize) {
            Some(p) => product = p,
            None => overflow = true,
        }
    }
    // A zero extent makes the tensor empty, whatever the others multiply to.
    let numel = if empty {
        0
    } else if overflow {
        return Err(Error::Overflow);
    } else {
        product
    };
    let bits = element_bits(dtype);
    let (min, max) = if numel == 0 {
        (0, -1)
    } else if let Some(strides) = strides {
        let (mut min, mut max) = (0i64, 0i64);
        for (&extent, &stride) in shape.iter().zip(strides) {
            let span = stride.checked_mul(extent - 1).ok_or(Error::Overflow)?;
            if span >= 0 {
                max = max.checked_add(span).ok_or(Error::Overflow)?;
            } else {
                min = min.checked_add(span).ok_or(Error::Overflow)?;
            }
        }
        (min, max)
    } else {
        (0, i64::try_from(numel - 1).map_err(|_| Error::Overflow)?)
    };
    // Every addressed byte, relative to `data`, must lie within an `isize` of it.
    let bit_offset = |index: i64| (index as i128) * (bits as i128);
    // `>> 3` is floor division by 8 (div_euclid), without a 128-bit division call.
    let low = byte_offset as i128 + (bit_offset(min) >> 3);
    // One past the last element, in i128: `max` itself may be i64::MAX.
    let end = (max as i128 + 1) * (bits as i128);
    let high = byte_offset as i128 + ((end + 7) >> 3);
    let limit = isize::MAX as i128;
    if byte_offset as i128 > limit || low < -limit || high > limit {
        return Err(Error::Overflow);
    }
    // The dense byte size must also be representable.
    (numel as u128)
        .checked_mul(bits as u128)
        .filter(|b| (b + 7) >> 3 <= limit as u128)
        .ok_or(Error::Overflow)?;
    if data_is_null && numel != 0 {
        return Err(Error::NullData);
    }
    Ok(Extent { numel, min, max })
}

/// Compact row-major (C order) strides, in elements, for `shape`.
pub fn compact_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = alloc::vec![0i64; shape.len()];
    let mut acc: i64 = 1;
    for (s, &extent) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc = acc.wrapping_mul(extent.max(1));
    }
    strides
}

/// Whether `strides` describe compact row-major layout for `shape` (extent-1 strides ignored).
pub fn is_c_contiguous(shape: &[i64], strides: &[i64]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected: i64 = 1;
    for (&extent, &stride) in shape.iter().zip(strides).rev() {
        if extent != 1 {
            if stride != expected {
                return false;
            }
            expected = expected.saturating_mul(extent);
        }
    }
    true
}

#[cfg(test)]
mod examples {
    use super::{compact_strides, is_c_contiguous};

    #[test]
    fn c_order() {
        assert_eq!(compact_strides(&[2, 3, 4]), [12, 4, 1]);
        assert!(is_c_contiguous(&[2, 1, 3], &[3, 99, 1]));
        assert!(!is_c_contiguous(&[2, 3], &[1, 2]));
    }
}
