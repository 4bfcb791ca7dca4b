//! What a numpy array's own struct says, read directly (both borrow tables key by it): numpy's
//! `ndarray` type once someone imported numpy, the fields of `PyArrayObject` this crate reads
//! and its flags, whether an import views exactly the array's elements, and the base object
//! rust-numpy keys borrows by.

use core::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict, PyType};

use super::cpython;

/// numpy's `ndarray` type, once found.
pub(super) static NDARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();
/// `NDARRAY`'s type object, for the per-import check without a `Python` token look-up.
pub(super) static NDARRAY_PTR: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(core::ptr::null_mut());
/// `sys.modules`, where numpy is looked for.
static SYS_MODULES: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
/// Whether numpy's `__dlpack__` answers `max_version=(1, x)` with a versioned tensor (numpy >=
/// 2.1), which can say read-only; older numpy exports legacy capsules only.
static VERSIONED_EXPORT: AtomicBool = AtomicBool::new(false);
/// The major version of numpy's ABI (1 or 2) once the type is known.
static ABI_MAJOR: AtomicU32 = AtomicU32::new(0);

/// Where numpy publishes its C API table (`_ARRAY_API`, a capsule without a name), numpy 2's
/// module first.
const API_TABLES: [&str; 2] = [
    "numpy._core._multiarray_umath",
    "numpy.core._multiarray_umath",
];

/// numpy's `ndarray` type, once numpy has been imported by someone (never imports anything
/// itself): taken from numpy's own C API table (`_ARRAY_API` of its extension module, the
/// table every numpy C extension and rust-numpy use; pure Python can replace `numpy.ndarray`
/// or `numpy.__version__`, but cannot make a capsule), with the ABI and feature versions the
/// table reports. The table is trusted as numpy's C extensions trust it. Anything missing, half imported or of an ABI
/// other than numpy 1's or 2's is "not yet": nothing is cached and `None` is answered, so the
/// structs this crate reads are only ever read for the layouts it knows.
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
    let modules = modules.bind(py);
    for module in API_TABLES {
        let Ok(Some(found)) = modules.get_item(module) else {
            continue;
        };
        let Ok(capsule) = found
            .cast_into::<PyModule>()
            .map_err(PyErr::from)
            .and_then(|m| m.getattr(pyo3::intern!(py, "_ARRAY_API")))
            .and_then(|c| c.cast_into::<PyCapsule>().map_err(PyErr::from))
        else {
            continue;
        };
        // numpy's table has no name (numpy makes it so); a named capsule is someone else's.
        if !matches!(capsule.name(), Ok(None)) {
            continue;
        }
        let Ok(table) = capsule.pointer_checked(None) else {
            continue;
        };
        let table = table.as_ptr().cast::<*const c_void>();
        // SAFETY: a capsule of this name is numpy's C API table (only numpy's C code makes one):
        // slot 0 is `PyArray_GetNDArrayCVersion`, slot 211 `PyArray_GetNDArrayCFeatureVersion`
        // (both `unsigned int (void)`), slot 2 `&PyArray_Type`, in numpy 1 and 2 alike.
        let (abi, feature, ty) = unsafe {
            let version = |slot: usize| {
                let f: unsafe extern "C" fn() -> c_uint = core::mem::transmute(*table.add(slot));
                f()
            };
            (version(0), version(211), *table.add(2))
        };
        let abi_major = abi >> 24;
        if !(1..=2).contains(&abi_major) {
            return Ok(None);
        }
        // SAFETY: `&PyArray_Type`, a static type object of numpy's extension module, alive for
        // good (the module is never unloaded).
        let Ok(ty) = unsafe { Bound::from_borrowed_ptr(py, ty.cast_mut().cast::<ffi::PyObject>()) }
            .cast_into::<PyType>()
        else {
            return Ok(None);
        };
        if !ty.name().is_ok_and(|n| n == "ndarray") {
            return Ok(None);
        }
        // Stored before the type is published, so that whoever sees the type sees them.
        ABI_MAJOR.store(abi_major, Ordering::Release);
        // numpy 2.1 (feature version 0x13) made `__dlpack__` export versioned tensors.
        VERSIONED_EXPORT.store(abi_major == 2 && feature >= 0x13, Ordering::Release);
        let ty = ty.unbind();
        return Ok(Some(NDARRAY.get_or_init(py, || ty).bind(py)));
    }
    Ok(None)
}

/// numpy's `ndarray` type object, once numpy has been imported by someone (looked for until
/// then; see [`ndarray_type`]).
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

/// numpy's ABI major version (1 or 2) once [`known_ndarray`] found the type, else 0.
pub(super) fn abi_major() -> u32 {
    ABI_MAJOR.load(Ordering::Acquire)
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
