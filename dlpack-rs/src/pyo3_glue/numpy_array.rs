//! What a numpy array's own struct says, read directly (both borrow tables key by it): numpy's
//! `ndarray` type once someone imported numpy, the fields of `PyArrayObject` this crate reads
//! and its flags, whether an import views exactly the array's elements, and the base object
//! rust-numpy keys borrows by.

use core::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use super::cpython;

/// numpy's `ndarray` type, once found.
pub(super) static NDARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();
/// `NDARRAY`'s type object, for the per-import check without a `Python` token look-up.
pub(super) static NDARRAY_PTR: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(core::ptr::null_mut());
/// `sys.modules`, where numpy is looked for.
static SYS_MODULES: PyOnceLock<Py<PyDict>> = PyOnceLock::new();

/// numpy's `ndarray` type, once numpy has been imported by someone (never imports it itself).
pub(super) fn ndarray_type(py: Python<'_>) -> PyResult<Option<&Bound<'_, PyType>>> {
    if let Some(t) = NDARRAY.get(py) {
        return Ok(Some(t.bind(py)));
    }
    let modules = SYS_MODULES.get_or_try_init(py, || -> PyResult<Py<PyDict>> {
        Ok(py
            .import("sys")?
            .getattr("modules")?
            .cast_into::<PyDict>()?
            .unbind())
    })?;
    let Some(numpy) = modules.bind(py).get_item("numpy")? else {
        return Ok(None);
    };
    // Read before the type is published, so that whoever sees the type sees the answer.
    let version: String = numpy.getattr("__version__")?.extract()?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    VERSIONED_EXPORT.store((major, minor) >= (2, 1), Ordering::Release);
    let ty = numpy.getattr("ndarray")?.cast_into::<PyType>()?.unbind();
    Ok(Some(NDARRAY.get_or_init(py, || ty).bind(py)))
}

/// Whether numpy's `__dlpack__` answers `max_version=(1, x)` with a versioned tensor (numpy >=
/// 2.1), which can say read-only; older numpy exports legacy capsules only.
static VERSIONED_EXPORT: AtomicBool = AtomicBool::new(false);

/// numpy's `ndarray` type object, once numpy has been imported by someone (looked for in
/// `sys.modules` until then).
pub(super) fn known_ndarray(py: Python<'_>) -> PyResult<Option<*mut ffi::PyTypeObject>> {
    let ndarray = NDARRAY_PTR.load(Ordering::Acquire);
    if !ndarray.is_null() {
        return Ok(Some(ndarray));
    }
    let Some(found) = ndarray_type(py)? else {
        return Ok(None);
    };
    let ndarray = found.as_ptr().cast();
    NDARRAY_PTR.store(ndarray, Ordering::Release);
    Ok(Some(ndarray))
}

/// Whether numpy exports versioned tensors (see [`VERSIONED_EXPORT`]); meaningful once
/// [`known_ndarray`] found the type.
pub(super) fn versioned_export() -> bool {
    VERSIONED_EXPORT.load(Ordering::Acquire)
}

/// The fields of numpy's `PyArrayObject` this crate reads (its layout is numpy's ABI, the same
/// in numpy 1 and 2).
#[repr(C)]
pub(super) struct ArrayFields {
    ob_base: ffi::PyObject,
    pub(super) data: *mut c_char,
    pub(super) nd: c_int,
    pub(super) dimensions: *mut isize,
    pub(super) strides: *mut isize,
    pub(super) base: *mut ffi::PyObject,
    pub(super) descr: *mut ffi::PyObject,
    pub(super) flags: c_int,
}

/// numpy's `NPY_ARRAY_C_CONTIGUOUS` flag.
pub(super) const NPY_ARRAY_C_CONTIGUOUS: c_int = 0x0001;
/// numpy's `NPY_ARRAY_F_CONTIGUOUS` flag.
pub(super) const NPY_ARRAY_F_CONTIGUOUS: c_int = 0x0002;
/// numpy's `NPY_ARRAY_WRITEABLE` flag.
pub(super) const NPY_ARRAY_WRITEABLE: c_int = 0x0400;
/// numpy's `NPY_ARRAY_WRITEBACKIFCOPY` flag (a private copy written back to its base).
pub(super) const NPY_ARRAY_WRITEBACKIFCOPY: c_int = 0x2000;

/// Whether `tensor` (an import of the numpy array whose fields are `own`) views exactly the
/// array's own elements: the same first element, shape, and strides along every dimension
/// longer than 1 (numpy's export may normalise the others).
///
/// # Safety
///
/// `own` is the struct of a live numpy array (its `dimensions` and `strides` point at `nd`
/// values each), read attached.
pub(super) unsafe fn exports_itself(own: &ArrayFields, tensor: &crate::safe::AnyManaged) -> bool {
    let itemsize = crate::safe::element_bits(tensor.dtype()).div_ceil(8) as isize;
    let Ok(nd) = usize::try_from(own.nd) else {
        return false;
    };
    if own.data.cast::<c_void>() != tensor.data_ptr() || nd != tensor.ndim() {
        return false;
    }
    if nd == 0 {
        return true;
    }
    // SAFETY: the caller's contract: a live array's dimensions and strides hold `nd` values
    // each.
    let (dims, strides) = unsafe {
        (
            core::slice::from_raw_parts(own.dimensions, nd),
            core::slice::from_raw_parts(own.strides, nd),
        )
    };
    let ours = tensor.strides();
    tensor
        .shape()
        .iter()
        .zip(ours.iter())
        .zip(dims.iter().zip(strides))
        .all(|((&extent, &stride), (&d, &s))| {
            extent as isize == d && (d <= 1 || (stride as isize).wrapping_mul(itemsize) == s)
        })
}

/// The base object of `array` (following `base` through numpy arrays, as rust-numpy does), or
/// `None` before numpy's `ndarray` type is known.
///
/// # Safety
///
/// Attached, and `array` is a live numpy array.
pub(super) unsafe fn base_of(array: *mut ffi::PyObject) -> Option<usize> {
    let ndarray = NDARRAY_PTR.load(Ordering::Acquire);
    if ndarray.is_null() {
        return None;
    }
    let mut a = array;
    loop {
        // SAFETY: `a` is a live numpy array (the first by contract, later ones checked below).
        let fields = unsafe { &*a.cast::<ArrayFields>() };
        // A WRITEBACKIFCOPY array holds a private copy of its base's data, and numpy drops that
        // base when it resolves the copy (`nditer.close()`): it is its own base, before and
        // after, so that a key taken at import still meets the keys taken later.
        if fields.base.is_null() || fields.flags & NPY_ARRAY_WRITEBACKIFCOPY != 0 {
            return Some(a as usize);
        }
        let b = fields.base;
        // SAFETY: `b` is a live object (an array's base is a strong reference); attached.
        if unsafe { cpython::type_check(b, ndarray) } {
            a = b;
        } else {
            return Some(b as usize);
        }
    }
}
