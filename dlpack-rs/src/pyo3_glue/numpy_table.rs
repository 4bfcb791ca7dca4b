//! Our implementation of version 1 of rust-numpy's borrow-checking table, published when no
//! module made one before (`numpy_borrow.rs` is its client, and every copy of this crate's).
//!
//! The keys are rust-numpy's: a borrow is keyed by the array's base object (following `base`
//! through numpy arrays), then by the array's elements; shared borrows of one key are counted.
//! Two keys of one base conflict when they share a byte, decided exactly as the borrow registry
//! decides (`safe::overlap::Span`), where rust-numpy's own rule (the gcd of the strides dividing
//! the distance between the data pointers) ignores the element width. An exclusive borrow
//! conflicts with any borrow of a conflicting (or the same) key, a shared one with exclusive
//! ones only.

use core::ffi::{c_int, c_void};
use std::sync::Mutex;

use pyo3::ffi;
use pyo3::prelude::*;

use super::{cpython, Shared};
use crate::pyo3_glue::numpy_array::{
    ArrayFields, NDARRAY, NPY_ARRAY_WRITEABLE, NPY_ARRAY_WRITEBACKIFCOPY,
};
use crate::safe::overlap::Span;

/// The bytes a borrow names: those of the array's elements, as the borrow registry names a
/// strided view's (`safe::overlap::Span`: the range from the lowest to the highest element, on
/// the progression of the gcd of the byte strides of the axes it steps along).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Key {
    pub(super) span: Span,
}

impl Key {
    /// The key of elements of `itemsize` bytes at `data` with this shape and these byte
    /// strides (validated: the addressed range fits in an isize). A 0-d array holds one
    /// element (rust-numpy's own table gives it an empty range, which conflicts with nothing
    /// that starts at its element).
    fn of_layout(
        data: usize,
        axes: impl Iterator<Item = (isize, isize)> + Clone,
        itemsize: isize,
    ) -> Key {
        if axes.clone().any(|(d, _)| d == 0) {
            return Key {
                span: Span::range(data, data),
            };
        }
        let (mut low, mut high) = (0isize, 0isize);
        let mut period = 0usize;
        for (d, s) in axes {
            let span = (d - 1).wrapping_mul(s);
            if span >= 0 {
                high = high.wrapping_add(span);
            } else {
                low = low.wrapping_add(span);
            }
            if d > 1 {
                period = crate::safe::overlap::gcd(period, s.unsigned_abs());
            }
        }
        high = high.wrapping_add(itemsize);
        Key {
            span: Span::strided(
                data.wrapping_add_signed(low),
                data.wrapping_add_signed(high),
                period,
                itemsize.unsigned_abs(),
            ),
        }
    }

    /// Whether the two borrows share a byte (decided exactly, as the borrow registry does).
    fn conflicts(&self, other: &Key) -> bool {
        self.span.shares_byte(&other.span)
    }
}

/// The live borrows: (base object, key, count), count > 0 for shared borrows, -1 for an
/// exclusive one. A short list scanned whole (a process holds a handful of views at a time), so
/// taking and giving back a borrow allocates nothing once the list has grown.
type Flags = Vec<(usize, Key, isize)>;

struct OurFlags(Mutex<Flags>);

static FLAGS: OurFlags = OurFlags(Mutex::new(Vec::new()));

/// Our version-1 table.
pub(super) static OURS: Shared = Shared {
    version: 1,
    flags: core::ptr::null_mut(),
    acquire: ours_acquire,
    acquire_mut: ours_acquire_mut,
    release: ours_release,
    release_mut: ours_release_mut,
};

/// The key of an import of a numpy array, from the import's metadata (the array's layout as
/// numpy exported it, strides in elements; numpy's itemsize is the exported dtype's size).
pub(super) fn key_of_import(tensor: &crate::safe::AnyManaged) -> Key {
    key_of_layout(
        tensor.data_ptr(),
        tensor.shape(),
        &tensor.strides(),
        tensor.dtype(),
    )
}

/// The key of a tensor's layout: its first element, extents, strides in elements and dtype.
pub(super) fn key_of_layout(
    first: *mut core::ffi::c_void,
    shape: &[i64],
    strides: &[i64],
    dtype: crate::ffi::DLDataType,
) -> Key {
    let itemsize = crate::safe::element_bits(dtype).div_ceil(8) as isize;
    let axes = shape
        .iter()
        .zip(strides.iter())
        .map(|(&d, &s)| (d as isize, (s as isize).wrapping_mul(itemsize)));
    Key::of_layout(first as usize, axes, itemsize)
}

/// The base object and key of `array` (`itemsize`: its dtype's, when the caller knows it; else
/// read from the dtype).
///
/// # Safety
///
/// Attached, and `array` is a live numpy array.
unsafe fn base_and_key(array: *mut ffi::PyObject, itemsize: Option<isize>) -> Option<(usize, Key)> {
    // SAFETY: attached (this function's contract), so `Python` may be assumed.
    let py = unsafe { Python::assume_attached() };
    let ndarray = NDARRAY
        .get(py)?
        .bind(py)
        .as_ptr()
        .cast::<ffi::PyTypeObject>();
    let mut a = array;
    let base = loop {
        // SAFETY: `a` is a live numpy array (the first by contract, later ones checked below).
        let fields = unsafe { &*a.cast::<ArrayFields>() };
        // As in `base_of`: a WRITEBACKIFCOPY array is its own base.
        if fields.base.is_null() || fields.flags & NPY_ARRAY_WRITEBACKIFCOPY != 0 {
            break a;
        }
        let b = fields.base;
        // SAFETY: `b` is a live object (an array's base is a strong reference).
        if unsafe { cpython::type_check(b, ndarray) } {
            a = b;
        } else {
            break b;
        }
    };
    // SAFETY: `array` is a live numpy array: its fields are as numpy lays them out.
    let f = unsafe { &*array.cast::<ArrayFields>() };
    // SAFETY: attached, and `f` is the struct of the live array `array`.
    let (shape, strides) = unsafe { f.dims() }?;
    // SAFETY: `descr` is the array's live dtype object; attached.
    let descr = unsafe { Bound::from_borrowed_ptr(py, f.descr) };
    let itemsize: isize = match itemsize {
        Some(size) => size,
        None => descr
            .getattr(pyo3::intern!(py, "itemsize"))
            .ok()?
            .extract()
            .ok()?,
    };
    Some((
        base as usize,
        Key::of_layout(
            f.data as usize,
            shape.iter().copied().zip(strides.iter().copied()),
            itemsize,
        ),
    ))
}

fn with_flags<R>(f: impl FnOnce(&mut Flags) -> R) -> R {
    let mut guard = FLAGS.0.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut guard)
}

/// rust-numpy's `acquire`: 0, or -1 on a conflict (and on a panic, which must not unwind into
/// rust-numpy's C-ABI call).
unsafe extern "C" fn ours_acquire(_: *mut c_void, array: *mut ffi::PyObject) -> c_int {
    cpython::no_unwind(|| {
        // SAFETY: rust-numpy's contract: called attached, with a live numpy array.
        let Some((base, key)) = (unsafe { base_and_key(array, None) }) else {
            return -1;
        };
        ours_acquire_key(base, key, false)
    })
    .unwrap_or(-1)
}

/// rust-numpy's `acquire_mut`: 0, -1 on a conflict (or a panic), -2 for a read-only array.
unsafe extern "C" fn ours_acquire_mut(_: *mut c_void, array: *mut ffi::PyObject) -> c_int {
    cpython::no_unwind(|| {
        // SAFETY: rust-numpy's contract: a live numpy array.
        if unsafe { (*array.cast::<ArrayFields>()).flags } & NPY_ARRAY_WRITEABLE == 0 {
            return -2;
        }
        // SAFETY: as in `ours_acquire`.
        let Some((base, key)) = (unsafe { base_and_key(array, None) }) else {
            return -1;
        };
        ours_acquire_key(base, key, true)
    })
    .unwrap_or(-1)
}

/// Takes a shared or exclusive borrow of `key` under `base`: 0, or -1 on a conflict.
pub(super) fn ours_acquire_key(base: usize, key: Key, exclusive: bool) -> c_int {
    with_flags(|flags| {
        let mut same = None;
        for (i, (b, k, count)) in flags.iter().enumerate() {
            if *b != base {
                continue;
            }
            if *k == key {
                same = Some(i);
            }
            // An exclusive borrow conflicts with every borrow of a conflicting (or the same)
            // key, a shared one with exclusive ones only.
            if (exclusive || *count < 0) && (*k == key || key.conflicts(k)) {
                return -1;
            }
        }
        match same {
            Some(i) if flags[i].2 == isize::MAX => -1,
            Some(i) => {
                flags[i].2 += 1;
                0
            }
            None => {
                flags.push((base, key, if exclusive { -1 } else { 1 }));
                0
            }
        }
    })
}

/// Releases one borrow of `array` (`exclusive`: its exclusive one).
///
/// # Safety
///
/// As `ours_acquire`.
unsafe fn ours_release_any(array: *mut ffi::PyObject, exclusive: bool) {
    // SAFETY: forwarded.
    let Some((base, key)) = (unsafe { base_and_key(array, None) }) else {
        return;
    };
    ours_release_key(base, key, exclusive);
}

/// Gives back one borrow of `key` under `base` (`exclusive`: its exclusive one).
pub(super) fn ours_release_key(base: usize, key: Key, exclusive: bool) {
    with_flags(|flags| {
        let Some(i) = flags.iter().position(|(b, k, _)| *b == base && *k == key) else {
            return;
        };
        // A release gives back only a borrow of its own kind: a shared one decrements a count
        // (removing it at 1), an exclusive one removes only an exclusive entry.
        let count = &mut flags[i].2;
        let remove = match *count {
            -1 => exclusive,
            1 => !exclusive,
            c if c > 1 && !exclusive => {
                *count -= 1;
                false
            }
            _ => false,
        };
        if remove {
            flags.swap_remove(i);
        }
    })
}

/// rust-numpy's `release` (a panic is caught: it must not unwind into rust-numpy's call).
unsafe extern "C" fn ours_release(_: *mut c_void, array: *mut ffi::PyObject) {
    // SAFETY: rust-numpy's contract.
    let _ = cpython::no_unwind(|| unsafe { ours_release_any(array, false) });
}

/// rust-numpy's `release_mut` (a panic is caught, as in `ours_release`).
unsafe extern "C" fn ours_release_mut(_: *mut c_void, array: *mut ffi::PyObject) {
    // SAFETY: rust-numpy's contract.
    let _ = cpython::no_unwind(|| unsafe { ours_release_any(array, true) });
}
