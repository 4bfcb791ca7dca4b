//! candle (feature `candle`): a CPU `candle_core::Tensor` exports by one copy
//! ([`ManagedTensorVersioned::try_from`]) or, behind `unsafe`, zero-copy and read-only
//! ([`ManagedTensorVersioned::share_candle`]); any host tensor imports by one copy
//! (`candle_core::Tensor::try_from(&managed)`). Only the copy is safe: candle writes through
//! `&self` (`slice_set`, `Var::set`) into storage all clones share.
//!
//! ```
//! use candle_core::{Device, Tensor};
//! use dlpack_rs::safe::ManagedTensorVersioned;
//!
//! let t = Tensor::arange(0f32, 6.0, &Device::Cpu)?.reshape((2, 3))?.t()?; // strided
//! let exported = ManagedTensorVersioned::try_from(&t)?; // one copy, C order, 64-byte aligned
//! assert_eq!(exported.shape(), &[3, 2]);
//! assert_eq!(*exported.as_slice::<f32>()?, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
//!
//! let back = Tensor::try_from(&exported)?; // one copy into candle's storage
//! assert_eq!(back.to_vec2::<f32>()?, t.to_vec2::<f32>()?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use alloc::format;
use alloc::vec::Vec;
use core::ffi::c_void;

use candle_core::{CpuStorage, DType, Device, DeviceLocation, Layout, Storage, Tensor};

use super::gather;
use crate::ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensorVersioned,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY,
};
use crate::safe::import::{Kind, Managed, ManagedTensorVersioned};
use crate::safe::{
    copy_described, cpu_device, host_viewable, pack_validated, to_i64s, AlignedBytes,
    AnyBitPattern, Error, Readers, TensorInfo, Validated,
};

/// candle's F8E8M0 bytes as DLPack's `float8_e8m0fnu` elements, one byte each.
#[derive(Clone, Copy)]
#[repr(transparent)]
struct E8M0(#[allow(dead_code)] u8);

// SAFETY: one byte without padding, as `DTYPE` says; every byte is a value (0xff is NaN).
unsafe impl crate::safe::Element for E8M0 {
    const DTYPE: DLDataType = DLDataType::new(DLDataTypeCode::FLOAT8_E8M0FNU, 8, 1);
}
// SAFETY: every byte is a value (above).
unsafe impl AnyBitPattern for E8M0 {}

impl E8M0 {
    fn wrap(bytes: &[u8]) -> &[E8M0] {
        // SAFETY: `E8M0` is a transparent `u8` (same layout, validity); the slice borrows `bytes`.
        unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len()) }
    }
}

/// What candle's storage holds, as a slice of the element type: `$f::<T>(slice, args)`.
macro_rules! with_elements {
    ($storage:expr, $f:ident($($arg:expr),*)) => {
        match $storage {
            CpuStorage::U8(v) => $f(v.as_slice(), $($arg),*),
            CpuStorage::U32(v) => $f(v.as_slice(), $($arg),*),
            CpuStorage::I16(v) => $f(v.as_slice(), $($arg),*),
            CpuStorage::I32(v) => $f(v.as_slice(), $($arg),*),
            CpuStorage::I64(v) => $f(v.as_slice(), $($arg),*),
            CpuStorage::BF16(v) => $f(v.as_slice(), $($arg),*),
            CpuStorage::F16(v) => $f(v.as_slice(), $($arg),*),
            CpuStorage::F32(v) => $f(v.as_slice(), $($arg),*),
            CpuStorage::F64(v) => $f(v.as_slice(), $($arg),*),
            CpuStorage::F8E4M3(v) => $f(v.as_slice(), $($arg),*),
            CpuStorage::F8E8M0(v) => $f(E8M0::wrap(v), $($arg),*),
            CpuStorage::F6E2M3(_) | CpuStorage::F6E3M2(_) | CpuStorage::F4(_) => {
                Err(Error::Unserializable(
                    "candle's F6E2M3, F6E3M2 and F4 tensors hold raw bytes without the element \
                     layout DLPack's packed types need, and candle converts them to no other \
                     dtype: they are not exported"
                        .into(),
                ))
            }
        }
    };
}

/// The metadata of `layout` over `elements`, validated and checked to stay inside them.
fn describe<T: AnyBitPattern>(elements: &[T], layout: &Layout) -> Result<Validated, Error> {
    let start = layout.start_offset();
    let info = TensorInfo {
        data: elements.as_ptr().cast_mut().cast::<c_void>(),
        device: cpu_device(),
        dtype: T::DTYPE,
        shape: to_i64s(layout.dims())?,
        strides: Some(to_i64s(layout.stride())?),
        byte_offset: start
            .checked_mul(core::mem::size_of::<T>())
            .and_then(|b| u64::try_from(b).ok())
            .ok_or(Error::Overflow)?,
    };
    let validated = Validated::new(info)?;
    let extent = validated.extent();
    // candle's strides are unsigned: the lowest element is the first, `start` into the storage.
    let end = (start as i64)
        .checked_add(extent.max)
        .ok_or(Error::Overflow)?;
    if extent.numel > 0 && (extent.min < 0 || end >= elements.len() as i64) {
        return Err(Error::OutOfBounds {
            len: elements.len(),
            min: start as i64 + extent.min,
            max: end,
        });
    }
    Ok(validated)
}

/// A compact, 64-byte aligned copy of `layout` over `elements`.
fn copy_out<T: AnyBitPattern>(
    elements: &[T],
    layout: &Layout,
) -> Result<ManagedTensorVersioned, Error> {
    let source = describe(elements, layout)?;
    // SAFETY: `describe` checked that the layout addresses only `elements`, initialised values
    // that candle's read lock (held by the caller) keeps from being written during the copy.
    let (storage, copy) = unsafe { copy_described(&source) }?;
    // SAFETY: `copy` describes the new storage, which the keepalive owns alone; writable.
    unsafe {
        pack_validated::<DLManagedTensorVersioned, _>(
            storage,
            copy,
            DLPACK_FLAG_BITMASK_IS_COPIED,
            Readers::ExportOnly,
            Some(AlignedBytes::as_mut_ptr),
        )
    }
}

/// Refuses a tensor off the CPU ([`Error::NotHostAccessible`] naming its DLPack device).
fn on_cpu(tensor: &Tensor) -> Result<(), Error> {
    let (device_type, id) = match tensor.device().location() {
        DeviceLocation::Cpu => return Ok(()),
        DeviceLocation::Cuda { gpu_id } => (DLDeviceType::CUDA, gpu_id),
        DeviceLocation::Metal { gpu_id } => (DLDeviceType::METAL, gpu_id),
    };
    let id = i32::try_from(id).unwrap_or(i32::MAX);
    Err(Error::NotHostAccessible(DLDevice::new(device_type, id)))
}

/// A CPU tensor of any layout (start offset, strides, broadcast), copied: compact C order,
/// 64-byte aligned (jax shares it), writable, flagged `IS_COPIED`. F8E8M0 is `float8_e8m0fnu`.
/// Refused: device tensors ([`Error::NotHostAccessible`]) and candle's raw-byte F6E2M3, F6E3M2
/// and F4 ([`Error::Unserializable`]).
impl TryFrom<&Tensor> for ManagedTensorVersioned {
    type Error = Error;

    fn try_from(tensor: &Tensor) -> Result<Self, Error> {
        on_cpu(tensor)?;
        let (storage, layout) = tensor.storage_and_layout();
        match &*storage {
            Storage::Cpu(cpu) => with_elements!(cpu, copy_out(layout)),
            _ => unreachable!("a CPU tensor has CPU storage"),
        }
    }
}

/// What a zero-copy export keeps alive: a clone of the tensor (its storage's `Arc`).
struct Shared(#[allow(dead_code)] Tensor);

/// The zero-copy export of `layout` over `elements`, keeping `tensor` alive.
/// # Safety
/// As [`ManagedTensorVersioned::share_candle`].
unsafe fn share_out<T: AnyBitPattern>(
    elements: &[T],
    layout: &Layout,
    tensor: &Tensor,
) -> Result<ManagedTensorVersioned, Error> {
    let validated = describe(elements, layout)?;
    // SAFETY: `describe` kept the layout inside `elements`, candle's storage, which the tensor
    // clone keeps allocated; by the caller's contract nothing writes or replaces it. It exports
    // `READ_ONLY` with a shared registry borrow held until the deleter runs.
    unsafe {
        pack_validated::<DLManagedTensorVersioned, _>(
            Shared(tensor.clone()),
            validated,
            DLPACK_FLAG_BITMASK_READ_ONLY,
            Readers::Rust,
            None,
        )
    }
}

impl ManagedTensorVersioned {
    /// A CPU candle tensor exported without a copy, `READ_ONLY`; the export keeps the tensor's
    /// storage alive (on whatever thread its deleter runs).
    ///
    /// It takes any layout and refuses what [`ManagedTensorVersioned::try_from`] refuses. It takes
    /// the storage's read lock: a thread holding that lock's guard must not call it.
    ///
    /// # Safety
    /// While the export (or any consumer's view of it) lives:
    /// - no clone of the tensor's storage is written or replaced: no `slice_set`, `Var::set`,
    ///   in-place op or custom `inplace_op*` on any tensor or variable sharing it (a custom op
    ///   that swaps the storage's vector frees the memory);
    /// - no consumer writes the memory in place, through any framework: torch ignores
    ///   `READ_ONLY`, and numpy hands a read-only array to torch writable.
    ///
    /// ```
    /// use candle_core::{Device, Tensor};
    /// use dlpack_rs::safe::ManagedTensorVersioned;
    ///
    /// let t = Tensor::new(&[[1u8, 2], [3, 4]], &Device::Cpu)?;
    /// // SAFETY: `t` is not written while `shared` lives, and nothing writes `shared`.
    /// let shared = unsafe { ManagedTensorVersioned::share_candle(&t) }?;
    /// assert!(shared.is_read_only());
    /// assert_eq!(*shared.as_slice::<u8>()?, [1, 2, 3, 4]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn share_candle(tensor: &Tensor) -> Result<ManagedTensorVersioned, Error> {
        on_cpu(tensor)?;
        let (storage, layout) = tensor.storage_and_layout();
        match &*storage {
            // SAFETY: forwarded from this function's contract.
            Storage::Cpu(cpu) => unsafe { with_elements!(cpu, share_out(layout, tensor)) },
            _ => unreachable!("a CPU tensor has CPU storage"),
        }
    }
}

/// The candle dtype of a DLPack dtype, if candle has it.
fn candle_dtype(dtype: DLDataType) -> Option<DType> {
    Some(match dtype {
        DLDataType::UINT8 => DType::U8,
        DLDataType::UINT32 => DType::U32,
        DLDataType::INT16 => DType::I16,
        DLDataType::INT32 => DType::I32,
        DLDataType::INT64 => DType::I64,
        DLDataType::BFLOAT16 => DType::BF16,
        DLDataType::FLOAT16 => DType::F16,
        DLDataType::FLOAT32 => DType::F32,
        DLDataType::FLOAT64 => DType::F64,
        d if d == <float8::F8E4M3 as crate::safe::Element>::DTYPE => DType::F8E4M3,
        d if d == <E8M0 as crate::safe::Element>::DTYPE => DType::F8E8M0,
        _ => return None,
    })
}

/// The shape as candle holds it: every product of extents candle forms (its contiguous strides)
/// must fit a `usize`, which an empty tensor's other extents need not.
fn candle_shape(validated: &Validated) -> Result<Vec<usize>, Error> {
    let shape: Vec<usize> = validated.info().shape.iter().map(|&d| d as usize).collect();
    shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or(Error::Overflow)?;
    Ok(shape)
}

/// candle's F8E8M0 tensor of `validated`'s bytes.
/// # Safety
/// As [`gather`].
unsafe fn import_e8m0(validated: &Validated) -> Result<Tensor, Error> {
    let shape = candle_shape(validated)?;
    // SAFETY: forwarded from this function's contract; one byte per element.
    let bytes = unsafe { gather::<u8>(validated) }?;
    Tensor::from_raw_buffer(&bytes, DType::F8E8M0, &shape, &Device::Cpu)
        .map_err(|e| Error::Unserializable(format!("candle refused the tensor: {e}")))
}

/// The candle tensor of `validated`'s elements, copied once.
/// # Safety
/// As [`gather`].
unsafe fn import_as<T: AnyBitPattern + candle_core::WithDType>(
    validated: &Validated,
) -> Result<Tensor, Error> {
    let shape = candle_shape(validated)?;
    // SAFETY: forwarded from this function's contract.
    let elements = unsafe { gather::<T>(validated) }?;
    Tensor::from_vec(elements, shape, &Device::Cpu)
        .map_err(|e| Error::Unserializable(format!("candle refused the tensor: {e}")))
}

/// Any host tensor, copied once into a new candle CPU tensor: any strides and byte offset, these
/// dtypes only (u8, u32, i16, i32, i64, f16, bf16, f32, f64, float8_e4m3fn, float8_e8m0fnu).
/// Refused: memory that is not `kDLCPU` ([`Error::NotHostAccessible`]), another dtype
/// ([`Error::Unserializable`]), a tensor under a mutable view ([`Error::AlreadyBorrowed`]), extents
/// candle cannot hold ([`Error::Overflow`]), a broadcast too large ([`Error::OutOfMemory`]).
impl<K: Kind> TryFrom<&Managed<K>> for Tensor {
    type Error = Error;

    fn try_from(tensor: &Managed<K>) -> Result<Tensor, Error> {
        host_viewable(tensor.device())?;
        let dtype = candle_dtype(tensor.dtype()).ok_or_else(|| {
            Error::Unserializable(format!("candle has no {} tensors", tensor.dtype().name()))
        })?;
        let _shared = tensor.borrow_addressed(false)?;
        let validated = Validated::new(tensor.tensor_info())?;
        // SAFETY: host memory alive while `tensor` is, of the dtype matched, with a shared
        // registry borrow held above, so no Rust view writes it during the copy.
        unsafe {
            match dtype {
                DType::U8 => import_as::<u8>(&validated),
                DType::U32 => import_as::<u32>(&validated),
                DType::I16 => import_as::<i16>(&validated),
                DType::I32 => import_as::<i32>(&validated),
                DType::I64 => import_as::<i64>(&validated),
                DType::BF16 => import_as::<half::bf16>(&validated),
                DType::F16 => import_as::<half::f16>(&validated),
                DType::F32 => import_as::<f32>(&validated),
                DType::F64 => import_as::<f64>(&validated),
                DType::F8E4M3 => import_as::<float8::F8E4M3>(&validated),
                DType::F8E8M0 => import_e8m0(&validated),
                _ => unreachable!("candle_dtype maps to these only"),
            }
        }
    }
}
