//! A numpy array imported by reading its struct, as its own `__dlpack__` would hand it over.

use core::ffi::{c_char, c_int, c_long};
use std::sync::atomic::Ordering;

use pyo3::ffi;
use pyo3::prelude::*;

use crate::ffi::{
    DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_READ_ONLY,
};
use crate::pyo3_glue::numpy::array::{
    known_ndarray, root_array, ArrayFields, NDARRAY_PTR, NPY_ARRAY_C_CONTIGUOUS,
    NPY_ARRAY_WRITEABLE, NULL_CONTIGUOUS_STRIDES, VERSIONED_EXPORT,
};
use crate::pyo3_glue::runtime::cpython;
use crate::pyo3_glue::runtime::keepalive::release_owned;
use crate::safe::{Described, ManagedTensorVersioned};

/// The head of numpy's `PyArray_Descr` as far as read (the same in numpy 1 and 2).
#[repr(C)]
struct DescrHead {
    ob_base: core::cell::UnsafeCell<ffi::PyObject>,
    typeobj: *mut ffi::PyTypeObject,
    kind: c_char,
    type_char: c_char,
    byteorder: c_char,
    flags: c_char,
    type_num: c_int,
}

/// numpy's opposite byte-order character (`NPY_OPPBYTE`): byte-swapped, which `__dlpack__` refuses.
#[cfg(target_endian = "little")]
const OPPOSITE_BYTE_ORDER: c_char = b'>' as c_char;
#[cfg(target_endian = "big")]
const OPPOSITE_BYTE_ORDER: c_char = b'<' as c_char;

/// The DLPack type numpy's `__dlpack__` gives a built-in fixed-size type number.
fn dtype_of(type_num: c_int) -> Option<DLDataType> {
    let c_long_bits = (8 * core::mem::size_of::<c_long>()) as u8;
    let int = |bits| DLDataType::new(crate::ffi::DLDataTypeCode::INT, bits, 1);
    let uint = |bits| DLDataType::new(crate::ffi::DLDataTypeCode::UINT, bits, 1);
    Some(match type_num {
        0 => DLDataType::BOOL,
        1 => DLDataType::INT8,
        2 => DLDataType::UINT8,
        3 => DLDataType::INT16,
        4 => DLDataType::UINT16,
        5 => int(8 * core::mem::size_of::<c_int>() as u8),
        6 => uint(8 * core::mem::size_of::<c_int>() as u8),
        7 => int(c_long_bits),
        8 => uint(c_long_bits),
        9 => DLDataType::INT64,
        10 => DLDataType::UINT64,
        11 => DLDataType::FLOAT32,
        12 => DLDataType::FLOAT64,
        14 => DLDataType::COMPLEX64,
        15 => DLDataType::COMPLEX128,
        23 => DLDataType::FLOAT16,
        _ => return None,
    })
}

/// The element size of `descr` if [`dtype_of`] knows it (else ask numpy).
/// # Safety
/// `descr` is a live numpy dtype object.
pub(in crate::pyo3_glue) unsafe fn builtin_itemsize(descr: *mut ffi::PyObject) -> Option<isize> {
    // SAFETY: a live dtype object's head has this layout (this function's contract).
    let head = unsafe { &*descr.cast::<DescrHead>() };
    dtype_of(head.type_num).map(|d| isize::from(d.bits / 8))
}

/// Dimensions held in the block itself; more take a second allocation.
const INLINE: usize = 4;

/// The one (boxed) allocation of a direct import: managed struct, array, dimensions.
#[repr(C)]
struct Block {
    managed: DLManagedTensorVersioned,
    array: *mut ffi::PyObject,
    interp: i64,
    inline: [i64; 2 * INLINE],
    heap: Option<Box<[i64]>>,
}

/// The deleter: frees the block, then releases the array from any thread (as every keepalive).
unsafe extern "C" fn delete_block(ptr: *mut DLManagedTensorVersioned) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: the first field of a `Block` from `Box::into_raw` in `import`; deleters run once.
    let block = unsafe { Box::from_raw(ptr.cast::<Block>()) };
    let (array, interp) = (block.array, block.interp);
    drop(block);
    // SAFETY: the strong reference `import` took, of an object of interpreter `interp`.
    unsafe { release_owned(array, interp) };
}

/// The managed tensor of `obj` when it is exactly numpy's `ndarray` and numpy exports it as-is.
#[inline]
pub(in crate::pyo3_glue) fn import(
    obj: &Bound<'_, PyAny>,
) -> PyResult<Option<ManagedTensorVersioned>> {
    if !may_be_array(obj) {
        return Ok(None);
    }
    import_array(obj)
}

/// Whether `obj` may be an array the direct read takes (`false`, cheaply, for other producers).
#[inline]
pub(in crate::pyo3_glue) fn may_be_array(obj: &Bound<'_, PyAny>) -> bool {
    let known = NDARRAY_PTR.load(Ordering::Acquire);
    known.is_null() || obj.get_type_ptr() == known
}

struct Checked<'a> {
    fields: &'a ArrayFields,
    dtype: DLDataType,
    dims: &'a [isize],
    byte_strides: &'a [isize],
}

impl Checked<'_> {
    /// Writes the extents, then the strides in elements, into `dims` (`2 * ndim` values).
    /// # Safety
    /// `dims` is valid for `2 * ndim` writes.
    unsafe fn write_dims(&self, dims: *mut i64) {
        let ndim = self.dims.len();
        let itemsize = (self.dtype.bits / 8) as isize;
        for (i, (&d, &s)) in self.dims.iter().zip(self.byte_strides).enumerate() {
            // SAFETY: `i < ndim` (this function's contract).
            unsafe {
                dims.add(i).write(d as i64);
                // Strides in elements, truncated as numpy's own export truncates them.
                dims.add(ndim + i).write((s / itemsize) as i64);
            }
        }
    }

    /// The tensor numpy's export describes, its shape and strides at `dims` (`write_dims`).
    fn tensor(&self, dims: *mut i64) -> DLTensor {
        let ndim = self.dims.len();
        let strides = self.fields.flags & NPY_ARRAY_C_CONTIGUOUS == 0
            || !NULL_CONTIGUOUS_STRIDES.load(Ordering::Acquire);
        let null = core::ptr::null_mut();
        DLTensor {
            data: self.fields.data.cast(),
            device: DLDevice::CPU,
            ndim: ndim as i32,
            dtype: self.dtype,
            shape: if ndim > 0 { dims } else { null },
            strides: if ndim > 0 && strides {
                dims.wrapping_add(ndim)
            } else {
                null
            },
            byte_offset: 0,
        }
    }
}

/// The checks of the direct read ([`import`]'s conditions); `None` when one fails.
#[inline(always)]
fn checked<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<Option<Checked<'a>>> {
    let Some(ndarray) = known_ndarray(obj)? else {
        return Ok(None);
    };
    if obj.get_type_ptr() != ndarray || !VERSIONED_EXPORT.load(Ordering::Acquire) {
        return Ok(None);
    }
    // SAFETY: attached; `obj` is a live numpy array. Asked before the struct is read (no
    // reference into it is held across the capsule calls of the base chain).
    if !unsafe { on_the_cpu(obj.as_ptr(), ndarray) } {
        return Ok(None);
    }
    // SAFETY: attached; `obj` is exactly an `ndarray`; no Python code runs while `fields` is used.
    let fields = unsafe { &*obj.as_ptr().cast::<ArrayFields>() };
    // SAFETY: a live array's descriptor is a live dtype object, whose head has this layout.
    let descr = unsafe { &*fields.descr.cast::<DescrHead>() };
    let Some(dtype) = dtype_of(descr.type_num) else {
        return Ok(None);
    };
    if descr.byteorder == OPPOSITE_BYTE_ORDER {
        return Ok(None);
    }
    // SAFETY: attached, and `fields` is the struct of the live array `obj`.
    let Some((dims, byte_strides)) = (unsafe { fields.dims() }) else {
        return Ok(None);
    };
    let itemsize = (dtype.bits / 8) as isize;
    let one_element = dims.iter().try_fold(1isize, |n, &d| n.checked_mul(d)) == Some(1);
    if fields.flags & NPY_ARRAY_C_CONTIGUOUS == 0
        && !one_element
        && dims
            .iter()
            .zip(byte_strides)
            .any(|(&d, &s)| d != 1 && s % itemsize != 0)
    {
        // numpy refuses strides that are not whole elements.
        return Ok(None);
    }
    Ok(Some(Checked {
        fields,
        dtype,
        dims,
        byte_strides,
    }))
}

#[inline(never)]
fn import_array(obj: &Bound<'_, PyAny>) -> PyResult<Option<ManagedTensorVersioned>> {
    let Some(c) = checked(obj)? else {
        return Ok(None);
    };
    let ndim = c.dims.len();
    let block = Box::new(Block {
        managed: DLManagedTensorVersioned {
            // numpy's own answer to `max_version=(1, 3)`.
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: core::ptr::null_mut(),
            deleter: Some(delete_block),
            flags: if c.fields.flags & NPY_ARRAY_WRITEABLE == 0 {
                DLPACK_FLAG_BITMASK_READ_ONLY
            } else {
                0
            },
            // SAFETY: all-zero is valid for every field; set once the block is in place.
            dl_tensor: unsafe { core::mem::zeroed() },
        },
        array: obj.as_ptr(),
        // SAFETY: `obj`'s token, on a thread importing it: attached (as for `PyKeepalive::new`).
        interp: unsafe { cpython::interpreter_id() },
        inline: [0; 2 * INLINE],
        heap: (ndim > INLINE).then(|| alloc::vec![0i64; 2 * ndim].into_boxed_slice()),
    });
    // Every pointer into the block is made from the raw pointer the box gave up.
    let raw = Box::into_raw(block);
    // SAFETY: `raw` is the live, uniquely owned block just made; `heap`, when present, holds
    // `2 * ndim` values, else `inline` holds `2 * INLINE >= 2 * ndim`.
    unsafe {
        let dims: *mut i64 = match &mut (*raw).heap {
            Some(heap) => heap.as_mut_ptr(),
            None => (&raw mut (*raw).inline).cast(),
        };
        c.write_dims(dims);
        (*raw).managed.dl_tensor = c.tensor(dims);
        (*raw).managed.manager_ctx = raw.cast();
    }
    // SAFETY: attached; the block's reference to the array, released by its deleter.
    unsafe { cpython::incref(obj.as_ptr()) };
    // SAFETY: a managed tensor this function owns, valid until its deleter runs: shape and
    // strides point at `ndim` values each in the block; its data is the array's, laid out as its
    // metadata says, alive while the block holds the array (numpy never frees or moves it first).
    let tensor = unsafe { ManagedTensorVersioned::from_raw(raw.cast()) }?;
    Ok(Some(tensor))
}

/// A non-owning view of `obj` where [`import`] would read it, and whether it is writable.
pub(in crate::pyo3_glue) fn view(obj: &Bound<'_, PyAny>) -> PyResult<Option<(Described, bool)>> {
    let Some(c) = checked(obj)? else {
        return Ok(None);
    };
    let ndim = c.dims.len();
    let mut inline = [0i64; 2 * INLINE];
    let mut heap = alloc::vec::Vec::new();
    let dims: *mut i64 = if ndim <= INLINE {
        inline.as_mut_ptr()
    } else {
        heap.resize(2 * ndim, 0);
        heap.as_mut_ptr()
    };
    // SAFETY: `dims` holds `2 * ndim` values (either buffer).
    unsafe { c.write_dims(dims) };
    // SAFETY: the tensor's shape and strides point at `ndim` values each, alive for the call.
    let view = unsafe { Described::new(&c.tensor(dims)) }?;
    Ok(Some((view, c.fields.flags & NPY_ARRAY_WRITEABLE != 0)))
}

/// Whether numpy lets `obj`, an array [`view`] read, be written now.
pub(in crate::pyo3_glue) fn writeable(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: attached; a live numpy array (`view` read it, the caller holds it), read in place.
    unsafe { (*obj.as_ptr().cast::<ArrayFields>()).flags & NPY_ARRAY_WRITEABLE != 0 }
}

/// Whether numpy says `array` is on the CPU (by a `numpy_dltensor[_versioned]` capsule ending
/// the base chain, else yes).
/// # Safety
/// Attached; `array` is a live numpy array and `ndarray` numpy's type.
unsafe fn on_the_cpu(array: *mut ffi::PyObject, ndarray: *mut ffi::PyTypeObject) -> bool {
    // SAFETY: forwarded; the root's base is NULL or a strong reference to a live object.
    let base = unsafe { (*root_array(array, ndarray).cast::<ArrayFields>()).base };
    // SAFETY: attached, a live object. These names are numpy's capsules from `np.from_dlpack`, each
    // keeping the producer's managed tensor while it lives (numpy reads the device from it too).
    unsafe {
        if base.is_null() || !cpython::is_capsule(base) {
            return true;
        }
        if let Some(m) = cpython::pointer_if_named(base, c"numpy_dltensor_versioned") {
            let m = m.cast::<DLManagedTensorVersioned>().as_ptr();
            return (*m).dl_tensor.device == DLDevice::CPU;
        }
        if let Some(m) = cpython::pointer_if_named(base, c"numpy_dltensor") {
            let m = m.cast::<crate::ffi::DLManagedTensor>().as_ptr();
            return (*m).dl_tensor.device == DLDevice::CPU;
        }
    }
    true
}
