//! candle (feature `candle`): a CPU `candle_core::Tensor` exports by one copy
//! ([`ManagedTensorVersioned::try_from`]) or, behind `unsafe`, zero-copy and read-only
//! ([`ManagedTensorVersioned::share_candle`]); any host tensor imports by one copy
//! (`candle_core::Tensor::try_from(&managed)`).
//!
//! candle writes through `&self` (`Tensor::slice_set`, `Var::set`) into storage that every
//! clone shares, and its read lock cannot outlive the borrow of the tensor, so only a copy is
//! safe; the zero-copy export is the caller's promise.
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

use candle_core::{CpuStorage, DType, Device, Layout, Storage, Tensor};

use crate::ffi::{
    DLDataType, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY,
};
use crate::safe::import::{Kind, Managed, ManagedTensorVersioned};
use crate::safe::{
    copy_described, cpu_device, host_viewable, pack_validated, AlignedBytes, AnyBitPattern, Error,
    Readers, TensorInfo, Validated,
};

/// What candle's storage holds, as a slice of the element type: `$f::<T>(slice, dtype)`.
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
            CpuStorage::F6E2M3(_)
            | CpuStorage::F6E3M2(_)
            | CpuStorage::F4(_)
            | CpuStorage::F8E8M0(_) => Err(Error::Unserializable(
                "candle's sub-byte tensors (f6, f4, f8e8m0) have no DLPack layout this crate \
                 exports; convert with `to_dtype` first"
                    .into(),
            )),
        }
    };
}

/// The metadata of `layout` over `elements`, validated and checked to stay inside them.
fn describe<T: AnyBitPattern>(elements: &[T], layout: &Layout) -> Result<Validated, Error> {
    let to_i64 = |v: &[usize]| -> Result<Vec<i64>, Error> {
        v.iter()
            .map(|&x| i64::try_from(x).map_err(|_| Error::Overflow))
            .collect()
    };
    let start = layout.start_offset();
    let info = TensorInfo {
        data: elements.as_ptr().cast_mut().cast::<c_void>(),
        device: cpu_device(),
        dtype: T::DTYPE,
        shape: to_i64(layout.dims())?,
        strides: Some(to_i64(layout.stride())?),
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

/// Refuses a tensor off the CPU.
fn on_cpu(tensor: &Tensor) -> Result<(), Error> {
    if tensor.device().is_cpu() {
        Ok(())
    } else {
        Err(Error::Unserializable(format!(
            "a candle tensor on {:?} exports from the CPU only: move it with \
             `to_device(&Device::Cpu)` first",
            tensor.device()
        )))
    }
}

/// A CPU tensor, copied: compact C order, 64-byte aligned (jax shares it), writable,
/// flagged `IS_COPIED`, whatever layout candle describes (start offset, strides, broadcast).
///
/// Device tensors and candle's sub-byte dtypes are refused with [`Error::Unserializable`].
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
///
/// # Safety
/// As [`ManagedTensorVersioned::share_candle`].
unsafe fn share_out<T: AnyBitPattern>(
    elements: &[T],
    layout: &Layout,
    tensor: &Tensor,
) -> Result<ManagedTensorVersioned, Error> {
    let validated = describe(elements, layout)?;
    // SAFETY: `describe` checked the layout stays inside `elements`, candle's storage, which
    // the tensor clone keeps allocated and in place (candle never reallocates a storage's
    // vector); nobody writes it by the caller's contract, and it is exported `READ_ONLY` with
    // a shared registry borrow held until the deleter runs.
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
    /// Like the copy ([`ManagedTensorVersioned::try_from`]), it describes whatever layout
    /// candle has, and refuses device tensors and sub-byte dtypes.
    ///
    /// # Safety
    /// While the export (or any consumer's view of it) lives:
    /// - no clone of the tensor's storage is written: no `slice_set`, `Var::set` or in-place
    ///   op on any tensor or variable sharing it (candle writes through `&self`);
    /// - no consumer writes the memory: torch ignores `READ_ONLY` (SAFETY.md), so a torch
    ///   tensor made from it must not be written in place.
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
        _ => return None,
    })
}

/// The elements `validated` describes, in C order, in a new vector.
///
/// # Safety
/// `validated` describes initialised host memory of `T`s that nobody writes during the call.
unsafe fn gather<T: AnyBitPattern>(validated: &Validated) -> Vec<T> {
    let info = validated.info();
    let numel = validated.extent().numel;
    let mut out = Vec::with_capacity(numel);
    let first = info
        .data
        .cast::<u8>()
        .wrapping_add(info.byte_offset as usize)
        .cast::<T>();
    let ndim = info.shape.len();
    let strides = info
        .strides
        .clone()
        .unwrap_or_else(|| crate::safe::compact_strides(&info.shape));
    let mut index = alloc::vec![0i64; ndim];
    for _ in 0..numel {
        let offset: i64 = index.iter().zip(&strides).map(|(&k, &s)| k * s).sum();
        // SAFETY: `index` is within the shape, so the element is one the validated layout
        // addresses (caller's contract); read unaligned, any bit pattern is a `T`.
        out.push(unsafe { first.offset(offset as isize).read_unaligned() });
        for axis in (0..ndim).rev() {
            index[axis] += 1;
            if index[axis] < info.shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    out
}

/// The candle tensor of `validated`'s elements, copied once.
///
/// # Safety
/// As [`gather`].
unsafe fn import_as<T: AnyBitPattern + candle_core::WithDType>(
    validated: &Validated,
) -> Result<Tensor, Error> {
    let shape: Vec<usize> = validated.info().shape.iter().map(|&d| d as usize).collect();
    // SAFETY: forwarded from this function's contract.
    let elements = unsafe { gather::<T>(validated) };
    Tensor::from_vec(elements, shape, &Device::Cpu)
        .map_err(|e| Error::Unserializable(format!("candle refused the tensor: {e}")))
}

/// Any host tensor, copied once into a new candle CPU tensor (candle's storage owns a `Vec`):
/// every dtype both have (u8, u32, i16, i32, i64, f16, bf16, f32, f64, f8e4m3fn), any strides
/// and byte offset.
///
/// Refused: memory that is not `kDLCPU` ([`Error::NotHostAccessible`]), a dtype candle lacks
/// ([`Error::Unserializable`] naming it), a tensor a mutable view of holds
/// ([`Error::AlreadyBorrowed`]).
impl<K: Kind> TryFrom<&Managed<K>> for Tensor {
    type Error = Error;

    fn try_from(tensor: &Managed<K>) -> Result<Tensor, Error> {
        host_viewable(tensor.device())?;
        let dtype = candle_dtype(tensor.dtype()).ok_or_else(|| {
            Error::Unserializable(format!(
                "candle has no {} tensors",
                crate::safe::DtypeName(tensor.dtype())
            ))
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
                _ => unreachable!("candle_dtype maps to these only"),
            }
        }
    }
}
