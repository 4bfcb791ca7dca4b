//! The `__dlpack__` keyword arguments and the export they ask for (legacy or versioned capsule,
//! zero-copy or a copy).

use core::ffi::c_void;

use pyo3::exceptions::{PyBufferError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyCapsule, PyTuple};

use crate::ffi::{
    DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY,
};
use crate::safe::{self, cpu_device};

use crate::pyo3_glue::runtime::capsule::into_capsule;

/// The parsed and type-checked keyword arguments of one `__dlpack__` call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DLPackArgs {
    /// The consumer's stream (`None`: the producer's default, the only choice for CPU data).
    pub stream: Option<i64>,
    /// The highest DLPack version the consumer reads; `None` asks for a legacy capsule.
    pub max_version: Option<DLPackVersion>,
    /// The device the consumer wants the data on; `None`: where it is.
    pub dl_device: Option<DLDevice>,
    /// Always copy (`true`), never (`false`), or only if needed (`None`).
    pub copy: Option<bool>,
}

impl DLPackArgs {
    /// Parses the four keyword arguments. `stream` is `None` or an `int`; `max_version` and
    /// `dl_device` `None` or a pair of `int`s (`TypeError` otherwise) fitting `u32` and `i32`
    /// (`ValueError` otherwise); `copy` is `None`, `True` or `False` (`ValueError` otherwise).
    pub fn parse(
        stream: Option<Bound<'_, PyAny>>,
        max_version: Option<Bound<'_, PyAny>>,
        dl_device: Option<Bound<'_, PyAny>>,
        copy: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let stream = match stream.filter(|s| !s.is_none()) {
            None => None,
            Some(s) => Some(s.extract::<i64>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "stream must be None or an int, not {}",
                    type_name(&s)
                ))
            })?),
        };
        let max_version = optional_pair::<u32>(
            max_version,
            "max_version must be None or a tuple of two ints (major, minor)",
            "max_version is out of range",
        )?
        .map(|(major, minor)| DLPackVersion { major, minor });
        let dl_device = optional_pair::<i32>(
            dl_device,
            "dl_device must be None or a tuple of two ints (device_type, device_id)",
            "dl_device is out of range",
        )?
        .map(|(device_type, device_id)| DLDevice {
            device_type: DLDeviceType(device_type),
            device_id,
        });
        let copy = match copy.filter(|c| !c.is_none()) {
            None => None,
            Some(c) => match c.cast::<PyBool>() {
                Ok(b) => Some(b.is_true()),
                Err(_) => {
                    return Err(PyValueError::new_err(format!(
                        "copy must be None, True or False, not {}",
                        type_name(&c)
                    )))
                }
            },
        };
        Ok(DLPackArgs {
            stream,
            max_version,
            dl_device,
            copy,
        })
    }

    /// Whether the consumer reads versioned capsules (`max_version` major >= 1).
    pub fn versioned(&self) -> bool {
        self.max_version.is_some_and(|v| v.major >= 1)
    }

    /// Checks `stream` against the data's device (`ValueError`): host memory takes only `None`;
    /// CUDA refuses 0, ROCm 1 and 2, and both values below -1.
    pub fn check_stream(&self, device: DLDevice) -> PyResult<()> {
        let Some(stream) = self.stream else {
            return Ok(());
        };
        let t = device.device_type;
        let ok = if t == DLDeviceType::CUDA || t == DLDeviceType::CUDA_MANAGED {
            stream != 0 && stream >= -1
        } else if t == DLDeviceType::ROCM {
            stream != 1 && stream != 2 && stream >= -1
        } else {
            !t.is_host_accessible()
        };
        if ok {
            Ok(())
        } else if t.is_host_accessible() && t != DLDeviceType::CUDA_MANAGED {
            Err(PyValueError::new_err(format!(
                "stream must be None for data on {t:?}, got {stream}"
            )))
        } else {
            Err(PyValueError::new_err(format!(
                "stream {stream} is not valid for data on {t:?}"
            )))
        }
    }
}

/// The stream to order pending work before, for a checked `stream` argument: `None` is the
/// default stream (CUDA's legacy 1, ROCm's 0), -1 none. `None` for devices without streams.
pub(crate) fn ordered_stream(device: DLDevice, stream: Option<i64>) -> Option<i64> {
    let t = device.device_type;
    let default = if t == DLDeviceType::CUDA || t == DLDeviceType::CUDA_MANAGED {
        1
    } else if t == DLDeviceType::ROCM {
        0
    } else {
        return None;
    };
    match stream {
        None => Some(default),
        Some(-1) => None,
        Some(s) => Some(s),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `None`, or a pair of ints that fit `T`: `TypeError` (`not_pair`) for anything else, then
/// `ValueError` (`out_of_range`) for ints that do not fit. Other errors of an item's
/// `__index__` propagate (the first item's first).
fn optional_pair<T: TryFrom<i64>>(
    value: Option<Bound<'_, PyAny>>,
    not_pair: &'static str,
    out_of_range: &'static str,
) -> PyResult<Option<(T, T)>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let fit = |x: i64| T::try_from(x).map_err(|_| PyValueError::new_err(out_of_range));
    #[cfg(not(feature = "abi3"))]
    if let Some((a, b)) = crate::pyo3_glue::runtime::cpython::exact_int_pair(&value) {
        return Ok(Some((fit(a)?, fit(b)?)));
    }
    let py = value.py();
    let t = value
        .cast::<PyTuple>()
        .ok()
        .filter(|t| t.len() == 2)
        .ok_or_else(|| PyTypeError::new_err(not_pair))?;
    // `None`: not an int (bools excluded); `Some(None)`: an int beyond i64.
    let item = |i: usize| -> PyResult<Option<Option<i64>>> {
        let x = t.get_borrowed_item(i)?;
        if x.is_instance_of::<PyBool>() {
            return Ok(None);
        }
        match x.extract::<i64>() {
            Ok(v) => Ok(Some(Some(v))),
            Err(e) if e.is_instance_of::<PyOverflowError>(py) => Ok(Some(None)),
            Err(e) if e.is_instance_of::<PyTypeError>(py) => Ok(None),
            Err(e) => Err(e),
        }
    };
    match (item(0)?, item(1)?) {
        (None, _) | (_, None) => Err(PyTypeError::new_err(not_pair)),
        (Some(Some(a)), Some(Some(b))) => Ok(Some((fit(a)?, fit(b)?))),
        _ => Err(PyValueError::new_err(out_of_range)),
    }
}

/// The producer side of `__dlpack__`: exports the validated tensor, kept alive by `keepalive`,
/// as the capsule `args` ask for.
///
/// `dl_device` must be the data's device, or `kDLCPU:0` for plain CPU data (a copy); anything
/// else raises `BufferError`. `copy=True` or a device change makes a compact copy flagged
/// `IS_COPIED` (`BufferError` with `copy=False`); otherwise `keepalive` lives until the
/// consumer's deleter call. A legacy capsule cannot say "read-only": read-only data is copied
/// for `copy=None` (what jax gets) and refused for `copy=False`, unless `share_legacy` (the
/// owner's [`share_read_only_legacy`](crate::IntoDLPack::share_read_only_legacy)) shares it.
///
/// # Safety
///
/// The metadata must describe initialised memory that stays valid (and writable by the
/// consumer unless `read_only`) while `keepalive` lives: the
/// [`IntoDLPack`](crate::IntoDLPack) contract. `readers` must be
/// [`Readers::Rust`](safe::Readers) when Rust code outside the export may read the memory
/// meanwhile (read-only exports hold a shared borrow regardless). Writers outside the borrow
/// registry (foreign code holding the memory writable) are the caller's to exclude.
#[allow(clippy::too_many_arguments)] // one per decision the caller made
pub(crate) unsafe fn export_capsule<'py, K: Send + 'static>(
    py: Python<'py>,
    validated: safe::Validated,
    read_only: bool,
    readers: safe::Readers,
    share_legacy: bool,
    keepalive: K,
    args: &DLPackArgs,
) -> PyResult<Bound<'py, PyCapsule>> {
    args.check_stream(validated.info().device)?;
    if copy_needed(&validated, read_only, share_legacy, args)? {
        // SAFETY: forwarded from this function's contract.
        return unsafe { export_host_copy(py, validated, keepalive, args) };
    }
    if read_only && share_legacy && !args.versioned() {
        // The owner's opt-in: trust the consumer not to write. `Readers::Rust` keeps the shared
        // borrow a read-only export holds, so no view of this crate writes the memory.
        // SAFETY: forwarded from this function's contract; a consumer's write despite the
        // opt-in is a foreign write, outside the model.
        return unsafe {
            pack_validated_capsule(py, keepalive, validated, 0, safe::Readers::Rust, args, None)
        };
    }
    let flags = if read_only {
        DLPACK_FLAG_BITMASK_READ_ONLY
    } else {
        0
    };
    // SAFETY: forwarded from this function's contract.
    unsafe { pack_validated_capsule(py, keepalive, validated, flags, readers, args, None) }
}

/// Whether the export must be a copy (`copy=True`, the host from plain CPU memory, or a legacy
/// request of read-only data with `copy=None` and no sharing opt-in); refusals are `BufferError`.
#[inline]
fn copy_needed(
    validated: &safe::Validated,
    read_only: bool,
    share_legacy: bool,
    args: &DLPackArgs,
) -> PyResult<bool> {
    let device = validated.info().device;
    let mut must_copy = args.copy == Some(true);
    if let Some(wanted) = args.dl_device {
        if wanted != device {
            // Plain CPU memory only: queued device work may still be writing pinned or managed
            // memory.
            let to_host = wanted == cpu_device() && device.device_type.is_host_viewable();
            if !to_host {
                return Err(PyBufferError::new_err(format!(
                    "cannot export data on {device} to device {wanted}"
                )));
            }
            if args.copy == Some(false) {
                return Err(PyBufferError::new_err(
                    "copy=False, but exporting to the requested device needs a copy",
                ));
            }
            must_copy = true;
        }
    }
    if read_only && !args.versioned() && args.copy.is_none() && !share_legacy {
        // A legacy capsule cannot say "read-only": `copy=None` means "reuse if possible, else
        // copy" (the array API); `copy=False` keeps the legacy export's `BufferError`.
        must_copy = true;
    }
    Ok(must_copy)
}

/// Exports a writable host copy flagged `IS_COPIED`, releasing `keepalive` once copied.
///
/// # Safety
///
/// [`export_capsule`]'s contract for the memory.
unsafe fn export_host_copy<'py, K: Send + 'static>(
    py: Python<'py>,
    validated: safe::Validated,
    keepalive: K,
    args: &DLPackArgs,
) -> PyResult<Bound<'py, PyCapsule>> {
    let device = validated.info().device;
    if !device.device_type.is_host_viewable() {
        return Err(PyBufferError::new_err(format!(
            "cannot copy data on {device} (host copies are of kDLCPU memory only: device work \
             may still be writing it)"
        )));
    }
    // No view of this crate may write the source while it is copied.
    let source = validated.borrow(false)?;
    // SAFETY: initialised memory (this function's contract), kDLCPU (checked above), validated,
    // and borrowed shared, so no view of this crate writes it during the copy.
    let (buffer, copy) = unsafe { safe::copy_described(&validated) }?;
    drop(source);
    drop(keepalive);
    // SAFETY: `copy` describes the new storage, which `buffer` owns alone (no other reader).
    unsafe {
        pack_validated_capsule(
            py,
            buffer,
            copy,
            DLPACK_FLAG_BITMASK_IS_COPIED,
            safe::Readers::ExportOnly,
            args,
            Some(safe::AlignedBytes::as_mut_ptr),
        )
    }
}

/// Packs the export as the capsule `args` ask for (versioned, or legacy unless read-only).
///
/// # Safety
///
/// [`safe::pack_validated`]'s contract for `keepalive`, the metadata, `flags`, `readers` and
/// `data_of`.
unsafe fn pack_validated_capsule<'py, K: Send + 'static>(
    py: Python<'py>,
    keepalive: K,
    validated: safe::Validated,
    flags: u64,
    readers: safe::Readers,
    args: &DLPackArgs,
    data_of: Option<fn(&mut K) -> *mut c_void>,
) -> PyResult<Bound<'py, PyCapsule>> {
    if args.versioned() {
        // SAFETY: forwarded from this function's contract.
        let mt = unsafe {
            safe::pack_validated::<DLManagedTensorVersioned, K>(
                keepalive, validated, flags, readers, data_of,
            )
        }?;
        into_capsule(py, mt)
    } else {
        if flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0 {
            return Err(crate::pyo3_glue::runtime::capsule::legacy_read_only_error());
        }
        // SAFETY: forwarded from this function's contract (not read-only: checked above).
        let mt = unsafe {
            safe::pack_validated::<DLManagedTensor, K>(
                keepalive, validated, flags, readers, data_of,
            )
        }?;
        into_capsule(py, mt)
    }
}
