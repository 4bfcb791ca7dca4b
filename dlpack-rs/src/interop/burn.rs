//! burn (feature `burn`): a `burn_std::TensorData` (what burn's `Tensor::into_data` returns and
//! `Tensor::from_data` takes) exports without a copy when burn owns its bytes alone (shared
//! bytes and lazy storage are copied first, flagged `IS_COPIED`:
//! [`ManagedTensorVersioned::try_from`]), and any host tensor imports by one copy
//! (`TensorData::try_from(&managed)`).
//!
//! ```
//! use burn_std::TensorData;
//! use dlpack_rs::safe::ManagedTensorVersioned;
//!
//! let data = TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
//! let first = data.as_slice::<f32>()?.as_ptr();
//! let exported = ManagedTensorVersioned::try_from(data)?; // no copy, writable
//! assert_eq!((exported.shape(), exported.is_copied()), (&[2i64, 3][..], false));
//! assert_eq!(exported.as_slice::<f32>()?.as_ptr(), first);
//!
//! let back = TensorData::try_from(&exported)?; // one copy
//! assert_eq!(back.as_slice::<f32>()?, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use burn_std::{AccessError, BoolStore, Bytes, DType, Reader, TensorData, Writer};

use super::gather;
use crate::ffi::{DLDataType, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED};
use crate::safe::import::{Kind, Managed, ManagedTensorVersioned};
use crate::safe::{
    cpu_device, host_viewable, pack_validated, to_i64s, AnyBitPattern, Error, Readers, TensorInfo,
    Validated,
};

/// The DLPack dtype of a burn dtype: burn's `Flex32` holds `f32`s, its `bool` and `u8`-stored
/// bools are DLPack's 8-bit `bool`.
fn dlpack_dtype(dtype: DType) -> Result<DLDataType, Error> {
    Ok(match dtype {
        DType::F64 => DLDataType::FLOAT64,
        DType::F32 | DType::Flex32 => DLDataType::FLOAT32,
        DType::F16 => DLDataType::FLOAT16,
        DType::BF16 => DLDataType::BFLOAT16,
        DType::I64 => DLDataType::INT64,
        DType::I32 => DLDataType::INT32,
        DType::I16 => DLDataType::INT16,
        DType::I8 => DLDataType::INT8,
        DType::U64 => DLDataType::UINT64,
        DType::U32 => DLDataType::UINT32,
        DType::U16 => DLDataType::UINT16,
        DType::U8 => DLDataType::UINT8,
        DType::Bool(BoolStore::Native | BoolStore::U8) => DLDataType::BOOL,
        other => {
            return Err(Error::Unserializable(format!(
                "burn's {} data has no DLPack dtype (u32-stored bools and quantized data are \
                 not exported; convert them first)",
                other.name()
            )))
        }
    })
}

/// The first byte of `bytes` under burn's exclusive write access, whether it was there before
/// (nothing copied) and whether every byte is `0` or `1` (asked for bools only). A failed read of
/// lazy storage is an error, as is the panic burn's `Bytes::shared` raises on one (by `Deref`).
fn host_bytes(bytes: &mut Bytes, bools: bool) -> Result<(*mut u8, bool, bool), Error> {
    let access = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let resident = bytes.read(Reader::new().no_copy()).ok().map(<[u8]>::as_ptr);
        let memory = bytes.write(Writer::new())?;
        let valid = !bools || memory.iter().all(|&b| b <= 1);
        let data = memory.as_mut_ptr();
        Ok::<_, AccessError>((data, resident == Some(data.cast_const()), valid))
    }));
    match access {
        Ok(Ok(host)) => Ok(host),
        Ok(Err(e)) => Err(Error::Unserializable(format!(
            "burn cannot bring its bytes to the host: {e}"
        ))),
        Err(payload) => {
            let why = (payload.downcast_ref::<&str>().copied())
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("burn panicked");
            Err(Error::Unserializable(format!(
                "burn cannot bring its bytes to the host: {why}"
            )))
        }
    }
}

/// The data's bytes, exported without a copy through burn's exclusive write access: compact C
/// order, writable. Shared bytes (`Bytes::shared`, its views and splits, `Bytes::from_shared`) are
/// copied first, as burn copies them on any write even with no clone left, and lazy storage (file
/// or device) is read to the host: either is flagged `IS_COPIED`. Refused: u32-stored bools and
/// quantized data, storage burn cannot bring to the host ([`Error::Unserializable`]), bool bytes
/// other than `0` and `1` ([`Error::InvalidBool`]), extents DLPack cannot hold or more bytes than
/// an allocation can ([`Error::Overflow`]), bytes not aligned for the dtype
/// ([`Error::Misaligned`]).
impl TryFrom<TensorData> for ManagedTensorVersioned {
    type Error = Error;

    fn try_from(data: TensorData) -> Result<Self, Error> {
        let dtype = dlpack_dtype(data.dtype())?;
        let shape = to_i64s(data.shape().as_slice())?;
        let (mut bytes, _, _) = data.into_parts();
        // Lazy storage allocates its length when brought to the host: no allocation holds more.
        if isize::try_from(bytes.len()).is_err() {
            return Err(Error::Overflow);
        }
        let (data, resident, valid) = host_bytes(&mut bytes, dtype == DLDataType::BOOL)?;
        if !valid {
            return Err(Error::InvalidBool);
        }
        let align = usize::from(dtype.bits / 8);
        if data as usize % align != 0 {
            return Err(Error::Misaligned {
                align,
                address: data as usize,
            });
        }
        let flags = if resident {
            0
        } else {
            DLPACK_FLAG_BITMASK_IS_COPIED
        };
        let info = TensorInfo::contiguous(data.cast(), cpu_device(), dtype, shape);
        let validated = Validated::new(info)?;
        // SAFETY: `write` gave exclusive access to `shape`'s elements of `dtype` (burn checks the
        // length), initialised, aligned and, for bools, 0 or 1 (checked above). The `Bytes`, kept
        // until the deleter, owns them out of line (moving it moves no byte); no clone shares them.
        unsafe {
            pack_validated::<DLManagedTensorVersioned, _>(
                bytes,
                validated,
                flags,
                Readers::ExportOnly,
                None,
            )
        }
    }
}

/// The burn shape of `validated`: burn multiplies the extents in order, and so must fit each
/// product in a `usize` (an empty tensor's other extents need not).
fn burn_shape(validated: &Validated) -> Result<Vec<usize>, Error> {
    let shape: Vec<usize> = validated.info().shape.iter().map(|&d| d as usize).collect();
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or(Error::Overflow)?;
    Ok(shape)
}

/// burn's data of `validated`'s elements, copied once.
/// # Safety
/// As [`gather`].
unsafe fn import_as<T: AnyBitPattern + burn_std::Element>(
    validated: &Validated,
) -> Result<TensorData, Error> {
    let shape = burn_shape(validated)?;
    // SAFETY: forwarded from this function's contract.
    let elements = unsafe { gather::<T>(validated) }?;
    Ok(TensorData::new(elements, shape))
}

/// burn's bool data of `validated`'s bytes, copied once; any non-zero byte is `true`.
/// # Safety
/// As [`gather`].
unsafe fn import_bool(validated: &Validated) -> Result<TensorData, Error> {
    let shape = burn_shape(validated)?;
    // SAFETY: forwarded from this function's contract; one byte per element.
    let bytes = unsafe { gather::<u8>(validated) }?;
    // A `Vec<bool>` burn keeps as is (a byte vector it would copy to realign, aborting on OOM);
    // std collects this map of the vector's own iterator in place, a `bool` being a byte.
    let bools: Vec<bool> = bytes.into_iter().map(|b| b != 0).collect();
    Ok(TensorData::new(bools, shape))
}

/// Any host tensor, copied once into new burn data: any strides and byte offset, every dtype both
/// have (f64, f32, f16, bf16, i64, i32, i16, i8, u64, u32, u16, u8, bool). Refused: memory that is
/// not `kDLCPU` ([`Error::NotHostAccessible`]), another dtype ([`Error::Unserializable`]), a tensor
/// under a mutable view ([`Error::AlreadyBorrowed`]), extents whose product overflows
/// ([`Error::Overflow`]), a broadcast too large ([`Error::OutOfMemory`]).
impl<K: Kind> TryFrom<&Managed<K>> for TensorData {
    type Error = Error;

    fn try_from(tensor: &Managed<K>) -> Result<TensorData, Error> {
        host_viewable(tensor.device())?;
        let _shared = tensor.borrow_addressed(false)?;
        let validated = Validated::new(tensor.tensor_info())?;
        // SAFETY: host memory alive while `tensor` is, of the dtype matched, with a shared
        // registry borrow held above, so no Rust view writes it during the copy.
        unsafe {
            match tensor.dtype() {
                DLDataType::FLOAT64 => import_as::<f64>(&validated),
                DLDataType::FLOAT32 => import_as::<f32>(&validated),
                DLDataType::FLOAT16 => import_as::<half::f16>(&validated),
                DLDataType::BFLOAT16 => import_as::<half::bf16>(&validated),
                DLDataType::INT64 => import_as::<i64>(&validated),
                DLDataType::INT32 => import_as::<i32>(&validated),
                DLDataType::INT16 => import_as::<i16>(&validated),
                DLDataType::INT8 => import_as::<i8>(&validated),
                DLDataType::UINT64 => import_as::<u64>(&validated),
                DLDataType::UINT32 => import_as::<u32>(&validated),
                DLDataType::UINT16 => import_as::<u16>(&validated),
                DLDataType::UINT8 => import_as::<u8>(&validated),
                DLDataType::BOOL => import_bool(&validated),
                other => Err(Error::Unserializable(format!(
                    "burn has no {} data",
                    other.name()
                ))),
            }
        }
    }
}
