//! numpy's array struct read directly: its `ndarray` type, fields and flags.

use core::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict, PyType};

use crate::ffi::DLPACK_VERSIONED_CAPSULE_NAME;
use crate::pyo3_glue::runtime::cpython;

pub(in crate::pyo3_glue) static NDARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();
/// `NDARRAY`'s type object, for the per-import check without a `Python` token look-up.
pub(in crate::pyo3_glue) static NDARRAY_PTR: AtomicPtr<ffi::PyTypeObject> =
    AtomicPtr::new(core::ptr::null_mut());
/// Whether numpy's `__dlpack__` exports versioned tensors (numpy >= 2.1).
pub(in crate::pyo3_glue) static VERSIONED_EXPORT: AtomicBool = AtomicBool::new(false);
/// Whether numpy's `__dlpack__` gives C-contiguous arrays NULL strides (numpy 2.1 to 2.3).
pub(in crate::pyo3_glue) static NULL_CONTIGUOUS_STRIDES: AtomicBool = AtomicBool::new(false);

/// numpy's major version, by `numpy.__version__` (as rust-numpy itself reads it).
pub(in crate::pyo3_glue) fn numpy_major(numpy: &Bound<'_, PyAny>) -> Option<u32> {
    let version = numpy
        .getattr(pyo3::intern!(numpy.py(), "__version__"))
        .ok()?;
    version
        .extract::<String>()
        .ok()?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// Adopts `ty` (numpy's own `ndarray`) for numpy 1 or 2, with how it exports.
fn adopt<'py>(
    numpy: &Bound<'py, PyAny>,
    ty: Bound<'py, PyType>,
) -> PyResult<Option<&'py Bound<'py, PyType>>> {
    let py = ty.py();
    if !matches!(numpy_major(numpy), Some(1 | 2)) {
        return Ok(None);
    }
    let Some((versioned, null_strides)) = exports_versioned(&ty) else {
        return Ok(None);
    };
    // Stored before the type is published, so that whoever sees the type sees them.
    VERSIONED_EXPORT.store(versioned, Ordering::Release);
    NULL_CONTIGUOUS_STRIDES.store(null_strides, Ordering::Release);
    let ty = ty.unbind();
    Ok(Some(
        crate::pyo3_glue::runtime::once::get_or_init(&NDARRAY, py, || ty).bind(py),
    ))
}

/// Whether `ty` is numpy's own `ndarray`: a static type named `numpy.ndarray`, large enough.
fn is_numpy_own(ty: &Bound<'_, PyType>) -> bool {
    let py = ty.py();
    if !cpython::is_static_type(ty) {
        return false;
    }
    let named = |attr: &Bound<'_, pyo3::types::PyString>, want: &str| {
        ty.getattr(attr)
            .and_then(|v| v.extract::<String>())
            .is_ok_and(|v| v == want)
    };
    named(pyo3::intern!(py, "__module__"), "numpy")
        && named(pyo3::intern!(py, "__name__"), "ndarray")
        && ty
            .getattr(pyo3::intern!(py, "__basicsize__"))
            .and_then(|v| v.extract::<usize>())
            .is_ok_and(|size| size >= core::mem::size_of::<ArrayFields>())
}

/// How numpy's `__dlpack__` exports (versioned; NULL strides), asked of a small array.
fn exports_versioned(ty: &Bound<'_, PyType>) -> Option<(bool, bool)> {
    let py = ty.py();
    let probe = ty.call1(((2usize,),)).ok()?;
    let kwargs = PyDict::new(py);
    kwargs
        .set_item(pyo3::intern!(py, "max_version"), (1u32, 3u32))
        .ok()?;
    match probe.call_method(pyo3::intern!(py, "__dlpack__"), (), Some(&kwargs)) {
        Ok(capsule) => {
            let capsule = capsule.cast_into::<PyCapsule>().ok()?;
            let Ok(managed) = capsule.pointer_checked(Some(DLPACK_VERSIONED_CAPSULE_NAME)) else {
                return Some((false, false));
            };
            let managed = managed.cast::<crate::ffi::DLManagedTensorVersioned>();
            // SAFETY: the versioned tensor numpy's own (static, unreplaceable) `__dlpack__` just
            // returned, alive (unconsumed) while we hold the capsule; only its strides are read.
            let null_strides = unsafe { managed.as_ref() }.dl_tensor.strides.is_null();
            Some((true, null_strides))
        }
        // numpy < 2.1 knows no `max_version`.
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) => Some((false, false)),
        Err(_) => None,
    }
}

/// The last type seen that is not `ndarray` nor derives from it, so its bases are walked once.
static NOT_NDARRAY: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(core::ptr::null_mut());

/// numpy's own `ndarray` type object ([`is_numpy_own`]), once someone imported numpy.
#[inline]
pub(in crate::pyo3_glue) fn known_ndarray(
    obj: &Bound<'_, PyAny>,
) -> PyResult<Option<*mut ffi::PyTypeObject>> {
    let ndarray = NDARRAY_PTR.load(Ordering::Acquire);
    if !ndarray.is_null() {
        return Ok(Some(ndarray));
    }
    find_ndarray(obj)
}

#[inline(never)]
fn find_ndarray(obj: &Bound<'_, PyAny>) -> PyResult<Option<*mut ffi::PyTypeObject>> {
    let py = obj.py();
    let Some(numpy) = cpython::imported_module(py, pyo3::intern!(py, "numpy"))? else {
        return Ok(None);
    };
    let ty = obj.get_type();
    let own = if NOT_NDARRAY.load(Ordering::Acquire) == ty.as_type_ptr() {
        None
    } else {
        let base = ty
            .mro()
            .iter()
            .filter_map(|b| b.cast_into_exact::<PyType>().ok())
            .find(is_numpy_own);
        if base.is_none() {
            NOT_NDARRAY.store(ty.as_type_ptr(), Ordering::Release);
        }
        base
    };
    let own = own.or_else(|| {
        numpy
            .getattr(pyo3::intern!(py, "ndarray"))
            .ok()
            .and_then(|t| t.cast_into_exact::<PyType>().ok())
            .filter(is_numpy_own)
    });
    let Some(found) = own.map(|own| adopt(&numpy, own)).transpose()?.flatten() else {
        return Ok(None);
    };
    let ndarray = found.as_ptr().cast();
    NDARRAY_PTR.store(ndarray, Ordering::Release);
    Ok(Some(ndarray))
}

/// The `PyArrayObject` fields this crate reads (numpy 1 and 2), while no Python code runs.
#[repr(C)]
pub(in crate::pyo3_glue) struct ArrayFields {
    ob_base: core::cell::UnsafeCell<ffi::PyObject>,
    pub(in crate::pyo3_glue) data: *mut c_char,
    pub(in crate::pyo3_glue) nd: c_int,
    pub(in crate::pyo3_glue) dimensions: *mut isize,
    pub(in crate::pyo3_glue) strides: *mut isize,
    pub(in crate::pyo3_glue) base: *mut ffi::PyObject,
    pub(in crate::pyo3_glue) descr: *mut ffi::PyObject,
    pub(in crate::pyo3_glue) flags: c_int,
}

impl ArrayFields {
    /// The array's extents and byte strides (`nd` of each), or `None` for a negative `nd`.
    /// # Safety
    /// A live numpy array's struct, read attached (`dimensions` and `strides` hold `nd` values).
    #[inline]
    pub(in crate::pyo3_glue) unsafe fn dims(&self) -> Option<(&[isize], &[isize])> {
        let nd = usize::try_from(self.nd).ok()?;
        if nd == 0 {
            return Some((&[], &[]));
        }
        // SAFETY: the caller's contract: `nd` values each, alive with the array `self` borrows.
        Some(unsafe {
            (
                core::slice::from_raw_parts(self.dimensions, nd),
                core::slice::from_raw_parts(self.strides, nd),
            )
        })
    }
}

/// The last numpy array of `array`'s base chain (the one whose base is NULL or not an array).
/// # Safety
/// Attached; `array` is a live numpy array and `ndarray` numpy's type.
#[inline]
pub(in crate::pyo3_glue) unsafe fn root_array(
    array: *mut ffi::PyObject,
    ndarray: *mut ffi::PyTypeObject,
) -> *mut ffi::PyObject {
    let mut a = array;
    loop {
        // SAFETY: `a` is a live numpy array (the first by contract, later ones checked below).
        let base = unsafe { (*a.cast::<ArrayFields>()).base };
        // SAFETY: `base` is a live object (an array's base is a strong reference); attached.
        if base.is_null() || !unsafe { cpython::type_check(base, ndarray) } {
            return a;
        }
        a = base;
    }
}

pub(in crate::pyo3_glue) const NPY_ARRAY_C_CONTIGUOUS: c_int = 0x0001;
pub(in crate::pyo3_glue) const NPY_ARRAY_F_CONTIGUOUS: c_int = 0x0002;
pub(in crate::pyo3_glue) const NPY_ARRAY_WRITEABLE: c_int = 0x0400;
