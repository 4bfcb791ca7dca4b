//! The `__dlpack__` keyword arguments, one export's [`RouteExport`], and the capsule they ask for.

use core::ffi::c_void;

use pyo3::exceptions::{PyBufferError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyCapsule, PyTuple};

use crate::ffi::{
    DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY,
};
use crate::pyo3_glue::runtime::capsule::into_capsule;
use crate::safe::{self, cpu_device, Readers, StreamOrder, Validated};
use crate::IntoDLPack;
use std::sync::Arc;

/// The parsed and type-checked keyword arguments of one `__dlpack__` call (`None`: not given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DLPackArgs {
    pub(crate) stream: Option<i64>,
    pub(crate) max_version: Option<DLPackVersion>,
    pub(crate) dl_device: Option<DLDevice>,
    pub(crate) copy: Option<bool>,
}

impl DLPackArgs {
    /// Parses the four keyword arguments (`TypeError` or `ValueError` for a bad one).
    pub(crate) fn parse(
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
            Some(c) => Some(c.cast::<PyBool>().map(|b| b.is_true()).map_err(|_| {
                PyValueError::new_err(format!(
                    "copy must be None, True or False, not {}",
                    type_name(&c)
                ))
            })?),
        };
        Ok(DLPackArgs {
            stream,
            max_version,
            dl_device,
            copy,
        })
    }

    /// Whether the consumer reads versioned capsules (`max_version` major >= 1).
    pub(crate) fn versioned(&self) -> bool {
        self.max_version.is_some_and(|v| v.major >= 1)
    }

    /// Checks `stream` against the data's device (`ValueError`; host memory takes only `None`).
    pub(crate) fn check_stream(&self, device: DLDevice) -> PyResult<()> {
        let Some(stream) = self.stream else {
            return Ok(());
        };
        let t = device.device_type;
        let ok = match streams(t) {
            Some((_, refused)) => stream >= -1 && !refused.contains(&stream),
            None => !t.is_host_accessible(),
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

/// The default stream and the values a consumer may not pass, for CUDA (1; 0) and ROCm (0; 1, 2).
fn streams(t: DLDeviceType) -> Option<(i64, &'static [i64])> {
    if t == DLDeviceType::CUDA || t == DLDeviceType::CUDA_MANAGED {
        Some((1, &[0]))
    } else if t == DLDeviceType::ROCM {
        Some((0, &[1, 2]))
    } else {
        None
    }
}

/// The stream to order pending work before, for a checked `stream` (`None`: default; -1: none).
pub(crate) fn ordered_stream(device: DLDevice, stream: Option<i64>) -> Option<i64> {
    let (default, _) = streams(device.device_type)?;
    match stream {
        None => Some(default),
        Some(-1) => None,
        Some(s) => Some(s),
    }
}

/// The name of `obj`'s type, for an error message (`?` if it has none).
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `None`, or a pair of ints that fit `T`: else `not_pair`, then `out_of_range`.
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

/// One export: validated metadata, its keepalive and flags (`unsafe` `RouteExport::kept_by`).
#[doc(hidden)]
pub struct RouteExport<O> {
    pub(crate) validated: Validated,
    pub(crate) read_only: bool,
    /// Every Rust access outside the export holds a registry borrow: no borrow for the export.
    pub(crate) registered: bool,
    /// [`IntoDLPack::share_read_only_legacy`].
    pub(crate) share: bool,
    /// For device data: orders a consumer's stream after pending work.
    pub(crate) order: Option<Arc<dyn StreamOrder>>,
    pub(crate) owner: O,
}

impl RouteExport<()> {
    /// What `this` describes, validated once (reusing the derive's extent).
    #[inline(always)]
    pub(crate) fn of<T: IntoDLPack + ?Sized>(this: &T) -> PyResult<Self> {
        let validated = match this.__tensor_info_with_extent()? {
            // SAFETY: `IntoDLPack` promises `Some(e)` only where `info.extent()` is `Ok(e)`.
            (info, Some(extent)) => unsafe { Validated::new_unchecked(info, extent) },
            (info, None) => Validated::new(info)?,
        };
        let order = if validated.info().device.device_type.is_host_viewable() {
            None
        } else {
            this.stream_order()
        };
        Ok(RouteExport {
            validated,
            read_only: this.is_read_only(),
            registered: this.rust_access_registered(),
            share: this.share_read_only_legacy(),
            order,
            owner: (),
        })
    }

    /// The export, kept alive by `owner`.
    /// # Safety
    /// `owner` keeps the described memory valid, initialised and in place while it lives.
    #[inline(always)]
    pub(crate) unsafe fn kept_by<O>(self, owner: O) -> RouteExport<O> {
        RouteExport {
            validated: self.validated,
            read_only: self.read_only,
            registered: self.registered,
            share: self.share,
            order: self.order,
            owner,
        }
    }
}

impl<O> RouteExport<O> {
    /// `READ_ONLY` for read-only data.
    pub(crate) fn flags(&self) -> u64 {
        if self.read_only {
            DLPACK_FLAG_BITMASK_READ_ONLY
        } else {
            0
        }
    }

    /// Who else reads the memory: Rust, unless the data is writable and every such access is
    /// registered (read-only data keeps its borrow, also where a legacy export drops the flag).
    pub(crate) fn readers(&self) -> Readers {
        if self.registered && !self.read_only {
            Readers::ExportOnly
        } else {
            Readers::Rust
        }
    }

    /// For device data: orders the consumer's `stream` after pending work, unless it is -1.
    #[inline(always)]
    pub(crate) fn order_before(&self, stream: Option<i64>) -> PyResult<()> {
        if let Some(order) = &self.order {
            let device = self.validated.info().device;
            if let Some(stream) = ordered_stream(device, stream) {
                order.order_before(device, stream)?;
            }
        }
        Ok(())
    }
}

/// The producer side of `__dlpack__`: exports `r` as the capsule `args` ask for.
/// # Safety
/// `r` keeps the `ClassRoute` contract (made by one, or by [`RouteExport::kept_by`] within its).
pub(crate) unsafe fn export_capsule<'py, O: Send + 'static>(
    py: Python<'py>,
    r: RouteExport<O>,
    args: &DLPackArgs,
) -> PyResult<Bound<'py, PyCapsule>> {
    crate::pyo3_glue::runtime::shared_registry::join(py)?;
    args.check_stream(r.validated.info().device)?;
    // Last, once the rest of the export is known to be fine.
    r.order_before(args.stream)?;
    if copy_needed(&r, args)? {
        // SAFETY: this function's contract.
        return unsafe { export_host_copy(py, r, args) };
    }
    // The owner's opt-in shares read-only data with a legacy consumer, trusting it not to write.
    let flags = if r.share && !args.versioned() {
        0
    } else {
        r.flags()
    };
    let readers = r.readers();
    // SAFETY: this function's contract; Rust reads outside the export are in `readers`.
    unsafe { pack_capsule(py, r.owner, r.validated, flags, readers, args, None) }
}

/// Whether the export must be a copy; refusals are `BufferError`.
#[inline]
fn copy_needed<O>(r: &RouteExport<O>, args: &DLPackArgs) -> PyResult<bool> {
    let device = r.validated.info().device;
    let mut must_copy = args.copy == Some(true);
    if let Some(wanted) = args.dl_device {
        if wanted != device {
            // Plain CPU memory only: device work may still be writing pinned or managed memory.
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
    if r.read_only && !args.versioned() && args.copy.is_none() && !r.share {
        // A legacy capsule cannot say "read-only": `copy=None` copies, `copy=False` refuses.
        must_copy = true;
    }
    Ok(must_copy)
}

/// Exports a writable host copy flagged `IS_COPIED`, releasing the keepalive once copied.
/// # Safety
/// [`export_capsule`]'s contract.
unsafe fn export_host_copy<'py, O>(
    py: Python<'py>,
    r: RouteExport<O>,
    args: &DLPackArgs,
) -> PyResult<Bound<'py, PyCapsule>> {
    let device = r.validated.info().device;
    if !device.device_type.is_host_viewable() {
        return Err(PyBufferError::new_err(format!(
            "cannot copy data on {device} (host copies are of kDLCPU memory only: device work \
             may still be writing it)"
        )));
    }
    let source = r.validated.borrow(false)?;
    // SAFETY: initialised memory kept by the keepalive (this function's contract), kDLCPU
    // (checked above), validated, and borrowed shared, so no view of this crate writes it.
    let (buffer, copy) = unsafe { safe::copy_described(&r.validated) }?;
    drop(source);
    drop(r.owner);
    // SAFETY: `copy` describes the new storage, which `buffer` owns alone (no other reader).
    unsafe {
        pack_capsule(
            py,
            buffer,
            copy,
            DLPACK_FLAG_BITMASK_IS_COPIED,
            Readers::ExportOnly,
            args,
            Some(safe::AlignedBytes::as_mut_ptr),
        )
    }
}

/// Packs the export as the capsule `args` ask for.
/// # Safety
/// [`safe::pack_validated`]'s contract for `keepalive`, `validated`, `flags`, `readers`, `data_of`.
unsafe fn pack_capsule<'py, K: Send + 'static>(
    py: Python<'py>,
    keepalive: K,
    validated: safe::Validated,
    flags: u64,
    readers: Readers,
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
        return into_capsule(py, mt);
    }
    if flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0 {
        return Err(crate::pyo3_glue::runtime::capsule::legacy_read_only_error());
    }
    // SAFETY: forwarded from this function's contract (not read-only: checked above).
    let mt = unsafe {
        safe::pack_validated::<DLManagedTensor, K>(keepalive, validated, flags, readers, data_of)
    }?;
    into_capsule(py, mt)
}
