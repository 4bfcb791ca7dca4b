//! The `__dlpack__(*, stream, max_version, dl_device, copy)` keyword arguments: parsing,
//! validation against the data, and the export they ask for (legacy or versioned capsule,
//! zero-copy or a real copy).

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
    /// The consumer's stream (`None` = the producer's default; only valid value for CPU data).
    pub stream: Option<i64>,
    /// The highest DLPack version the consumer reads; `None` asks for a legacy capsule.
    pub max_version: Option<DLPackVersion>,
    /// The device the consumer wants the data on; `None` = where it is.
    pub dl_device: Option<DLDevice>,
    /// `Some(true)`: always copy; `Some(false)`: never copy; `None`: copy only if needed.
    pub copy: Option<bool>,
}

impl DLPackArgs {
    /// Parses the four keyword arguments as Python passed them.
    ///
    /// - `stream`: `None` or an `int` (TypeError otherwise);
    /// - `max_version`: `None` or a 2-tuple of `int`s (TypeError otherwise, and for ints wider
    ///   than 64 bits), both non-negative and below 2^32 (ValueError otherwise: `(-1, 0)`);
    /// - `dl_device`: `None` or a 2-tuple of `int`s (TypeError otherwise), each fitting an
    ///   `int32_t` (ValueError otherwise);
    /// - `copy`: `None`, `True` or `False` (ValueError otherwise).
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

    /// Checks `stream` against the device of the data: CPU (and other host) memory only
    /// accepts `None`; CUDA accepts `None`, -1, 1, 2 and handles > 2 (0 is disallowed); ROCm
    /// accepts `None`, -1, 0 and handles > 2 (1 and 2 are disallowed). Raises `ValueError`.
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

/// The stream a producer orders its pending work before, for a `__dlpack__(stream=...)`
/// argument already checked against `device`: `None` means the default stream (CUDA's legacy
/// default, 1; ROCm's, 0), -1 no synchronisation. `None` for devices without streams.
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

/// `None`, or a tuple of two ints that fit `T`: TypeError (`not_pair`) for anything else, and
/// ValueError (`out_of_range`) for ints that do not fit, however large. An item's own
/// `__index__` that raises anything but `TypeError` or `OverflowError` raises that (the first
/// item's first); otherwise an item that is not an int decides before one out of range.
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
    // An item as an i64: `None` when it is not an int (bools excluded), `Some(None)` when it is
    // one beyond i64.
    let item = |i: usize| -> PyResult<Option<Option<i64>>> {
        // Borrowed items: no reference counting on this per-call path.
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

/// Exports the tensor described by `info`, kept alive by `keepalive`, as the capsule that
/// `args` ask for. This is the whole producer side of `__dlpack__`:
///
/// 1. `stream` is checked against the data's device ([`DLPackArgs::check_stream`]);
/// 2. `dl_device` must be the data's device (or `kDLCPU:0` for CPU data, by a copy when a copy
///    is allowed); anything else raises `BufferError`, a host copy of pinned, managed or device
///    memory included (queued device work may still be writing it);
/// 3. `copy=True` (or a device change) makes a real, compact copy flagged `IS_COPIED`
///    (`copy=False` with a needed copy raises `BufferError`); otherwise the export is
///    zero-copy and `keepalive` lives until the consumer's deleter call;
/// 4. `max_version` with major >= 1 gives a `"dltensor_versioned"` capsule (flags
///    `READ_ONLY` / `IS_COPIED`), else a legacy `"dltensor"` capsule, which cannot say
///    "read-only": read-only data is then copied when `copy` is `None` (the array API's "reuse
///    if possible, else copy"; what jax, which asks for legacy capsules only, gets), and refused
///    with `BufferError` when `copy=False`.
///
/// # Safety
///
/// The validated metadata must describe initialised memory that stays valid (and, unless `read_only`, writable
/// by the consumer) for as long as `keepalive` lives: the [`IntoDLPack`](crate::IntoDLPack)
/// contract. `readers` must be [`Readers::Rust`](safe::Readers) when Rust code outside the
/// export may read the memory while it lives (a frozen class through `&self`); read-only
/// exports hold a shared borrow of the bytes whatever it says. `share_legacy` (the owner's
/// [`share_read_only_legacy`](crate::IntoDLPack::share_read_only_legacy) opt-in) answers a legacy
/// request of read-only data with a zero-copy legacy capsule, still holding that borrow, instead
/// of a copy (`copy=None`) or `BufferError` (`copy=False`). What this function establishes
/// itself: no view of this crate writes the memory while a copy reads it (a shared borrow),
/// and no mutable view is granted while the export's borrow lives. Writers outside the
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
        // The owner's opt-in: a legacy capsule of read-only data, trusting the consumer not to
        // write it. It still holds the shared borrow a read-only export holds (`Readers::Rust`
        // registers it without the flag), so no view of this crate writes the memory meanwhile.
        // SAFETY: forwarded from this function's contract; consumers' writes to memory they
        // were asked not to write are foreign writes, outside the model.
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

/// Whether the export `args` ask for must be a copy: asked for (`copy=True`), another device
/// (the host only, from plain CPU memory), or a legacy request of read-only data with
/// `copy=None` (unless the owner opted in to sharing it). Refusals are `BufferError`.
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
            // Host copies are of plain CPU memory only: queued device work may still be
            // writing pinned or managed memory, which the CPU could read meanwhile.
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
        // A legacy capsule cannot say "read-only" (jax only ever asks for one). The array API's
        // `copy=None` means "reuse if possible, else copy": the one case where an export copies
        // without being asked to. `copy=False` keeps the `BufferError` of the legacy export.
        must_copy = true;
    }
    Ok(must_copy)
}

/// Exports a host copy of the memory `validated` describes (the keepalive is released once the
/// copy is made), flagged `IS_COPIED` and writable.
///
/// # Safety
///
/// As [`export_capsule`]'s contract for the memory.
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
    // No view of this crate may write the source while it is copied (whoever else owns the
    // memory: refused with BufferError while a mutable view lives).
    let source = validated.borrow(false)?;
    // SAFETY: initialised host-readable memory by this function's contract (kDLCPU memory as
    // checked above), validated, and borrowed shared, so no view of this crate writes it
    // during the copy.
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
/// As [`safe::pack_validated`]'s contract for `keepalive`, the metadata, `flags`, `readers` and
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
            return Err(read_only_legacy());
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

fn read_only_legacy() -> PyErr {
    PyBufferError::new_err(
        "cannot export read-only data as a legacy DLPack capsule (it cannot signal read-only); \
         ask for max_version=(1, x)",
    )
}
