//! Our version-1 implementation of rust-numpy's borrow-checking table, backed by the shared
//! registry; a release is matched by array object, not layout.

use core::ffi::{c_int, c_void};
use std::sync::Mutex;

use pyo3::ffi;
use pyo3::prelude::*;

use crate::pyo3_glue::numpy::array::{ArrayFields, NPY_ARRAY_WRITEABLE};
use crate::pyo3_glue::runtime::cpython;
use crate::safe::borrow::overlap::Span;
use crate::safe::borrow::BorrowToken;

/// Version 1 of rust-numpy's table (later versions append fields).
#[repr(C)]
pub(super) struct Shared {
    pub(super) version: u64,
    pub(super) flags: *mut c_void,
    pub(super) acquire: unsafe extern "C" fn(*mut c_void, *mut ffi::PyObject) -> c_int,
    pub(super) acquire_mut: unsafe extern "C" fn(*mut c_void, *mut ffi::PyObject) -> c_int,
    pub(super) release: unsafe extern "C" fn(*mut c_void, *mut ffi::PyObject),
    pub(super) release_mut: unsafe extern "C" fn(*mut c_void, *mut ffi::PyObject),
}

// SAFETY: immutable; its functions synchronise their own state (ours through `FLAGS`).
unsafe impl Sync for Shared {}

/// The registry's key of a strided view's bytes (`None`: beyond the address space).
fn key_of_axes(
    data: usize,
    axes: impl Iterator<Item = (isize, isize)> + Clone,
    itemsize: isize,
) -> Option<Span> {
    if axes.clone().any(|(d, _)| d == 0) {
        return Some(Span::range(data, data));
    }
    let (mut low, mut high) = (0isize, 0isize);
    let mut period = 0usize;
    for (d, s) in axes {
        let span = (d - 1).checked_mul(s)?;
        if span >= 0 {
            high = high.checked_add(span)?;
        } else {
            low = low.checked_add(span)?;
        }
        if d > 1 {
            period = crate::safe::borrow::overlap::gcd(period, s.unsigned_abs());
        }
    }
    high = high.checked_add(itemsize)?;
    Some(Span::strided(
        data.checked_add_signed(low)?,
        data.checked_add_signed(high)?,
        period,
        itemsize.unsigned_abs(),
    ))
}

/// A borrow rust-numpy took.
struct Entry {
    /// The array object it was taken for.
    array: usize,
    exclusive: bool,
    /// Not released yet (shared borrows of one array go back with the last).
    live: bool,
    /// The registry's borrow of the bytes the array addressed when it was taken.
    token: BorrowToken,
}

/// The borrows rust-numpy took: a short list scanned whole (a handful of views at a time).
static FLAGS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

pub(super) static OURS: Shared = Shared {
    version: 1,
    flags: core::ptr::null_mut(),
    acquire: ours_acquire::<false>,
    acquire_mut: ours_acquire::<true>,
    release: ours_release::<false>,
    release_mut: ours_release::<true>,
};

/// The key of a tensor's layout (`None` only where the layout was never validated).
pub(super) fn key_of_layout(
    first: *mut core::ffi::c_void,
    shape: &[i64],
    strides: &[i64],
    dtype: crate::ffi::DLDataType,
) -> Option<Span> {
    let itemsize = crate::safe::element_bits(dtype).div_ceil(8) as isize;
    let axes = shape
        .iter()
        .zip(strides.iter())
        .map(|(&d, &s)| (d as isize, (s as isize).wrapping_mul(itemsize)));
    key_of_axes(first as usize, axes, itemsize)
}

/// The key of `array`'s elements as its layout is now (`None`: beyond the address space).
/// # Safety
/// Attached, and `array` is a live numpy array.
pub(super) unsafe fn key_of_array(array: *mut ffi::PyObject) -> Option<Span> {
    // SAFETY: attached (this function's contract), so `Python` may be assumed.
    let py = unsafe { Python::assume_attached() };
    // The element size first: asking numpy runs Python code, which may free the extents.
    // SAFETY: `array` is a live numpy array; its fields read in place (no reference kept).
    let descr = unsafe { (*array.cast::<ArrayFields>()).descr };
    // Held to the comparison below, so no other descriptor can take its address meanwhile.
    let mut held = None;
    // SAFETY: `descr` is the array's live dtype object.
    let itemsize = match unsafe { crate::pyo3_glue::numpy::direct::builtin_itemsize(descr) } {
        Some(itemsize) => itemsize,
        None => held
            // SAFETY: `descr` is the array's live dtype object; attached.
            .insert(unsafe { Bound::from_borrowed_ptr(py, descr) })
            .getattr(pyo3::intern!(py, "itemsize"))
            .ok()?
            .extract()
            .ok()?,
    };
    // SAFETY: as above (read in place).
    if unsafe { (*array.cast::<ArrayFields>()).descr } != descr {
        // Changed while numpy was asked (a finalizer's `arr.dtype = ...`): refused.
        return None;
    }
    // Still the array's: giving this reference back frees nothing (no Python code runs).
    drop(held);
    // SAFETY: as above; no Python code runs from here to the key's last use of the struct.
    let f = unsafe { &*array.cast::<ArrayFields>() };
    // SAFETY: attached, and `f` is the struct of the live array `array`.
    let (shape, strides) = unsafe { f.dims() }?;
    key_of_axes(
        f.data as usize,
        shape.iter().copied().zip(strides.iter().copied()),
        itemsize,
    )
}

fn with_flags<R>(f: impl FnOnce(&mut Vec<Entry>) -> R) -> R {
    f(&mut FLAGS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// rust-numpy's `acquire` / `acquire_mut`: 0, -1 on a conflict (or a caught panic), -2 for an
/// exclusive borrow of a read-only array.
unsafe extern "C" fn ours_acquire<const EXCLUSIVE: bool>(
    _: *mut c_void,
    array: *mut ffi::PyObject,
) -> c_int {
    // SAFETY: rust-numpy's contract: called attached, with a live numpy array.
    cpython::no_unwind(|| unsafe { ours_acquire_any(array, EXCLUSIVE) }).unwrap_or(-1)
}

/// [`ours_acquire`]'s body: takes the registry's borrow of the bytes `array` addresses.
/// # Safety
/// Attached, and `array` is a live numpy array.
unsafe fn ours_acquire_any(array: *mut ffi::PyObject, exclusive: bool) -> c_int {
    // SAFETY: a live numpy array (this function's contract), read in place.
    let read_only = || unsafe { (*array.cast::<ArrayFields>()).flags } & NPY_ARRAY_WRITEABLE == 0;
    if exclusive && read_only() {
        return -2;
    }
    // SAFETY: attached (this function's contract).
    let py = unsafe { Python::assume_attached() };
    // Joins the registry all copies share, so this borrow meets theirs (a no-op once joined).
    if crate::pyo3_glue::runtime::shared_registry::join(py).is_err() {
        return -1;
    }
    // SAFETY: forwarded.
    let Some(span) = (unsafe { key_of_array(array) }) else {
        return -1;
    };
    // Joining and the key may have run Python code: a writable borrow asks numpy again.
    if exclusive && read_only() {
        return -2;
    }
    let Ok(token) =
        BorrowToken::acquire_strided(span.start, span.end, span.period, span.width, exclusive)
    else {
        return -1;
    };
    with_flags(|flags| {
        flags.push(Entry {
            array: array as usize,
            exclusive,
            live: true,
            token,
        })
    });
    0
}

/// The registry borrows a release gives back: usually one, without an allocation.
#[derive(Default)]
struct Back {
    first: Option<BorrowToken>,
    more: Vec<BorrowToken>,
}

impl Back {
    fn push(&mut self, token: BorrowToken) {
        if self.first.is_none() {
            self.first = Some(token);
        } else {
            self.more.push(token);
        }
    }
}

/// Releases one borrow of `array` (shared ones all go back once none is live).
fn ours_release_any(array: *mut ffi::PyObject, exclusive: bool) {
    let array = array as usize;
    let tokens = with_flags(|flags| {
        let mut back = Back::default();
        let Some(i) = flags
            .iter()
            .rposition(|e| e.array == array && e.exclusive == exclusive && e.live)
        else {
            return back;
        };
        if exclusive {
            back.push(flags.swap_remove(i).token);
            return back;
        }
        flags[i].live = false;
        if flags
            .iter()
            .any(|e| e.array == array && !e.exclusive && e.live)
        {
            return back;
        }
        let mut j = 0;
        while j < flags.len() {
            if flags[j].array == array && !flags[j].exclusive {
                back.push(flags.swap_remove(j).token);
            } else {
                j += 1;
            }
        }
        back
    });
    // The registry's borrows are given back outside the table's lock.
    drop(tokens);
}

/// rust-numpy's `release` / `release_mut` (a panic is caught).
unsafe extern "C" fn ours_release<const EXCLUSIVE: bool>(
    _: *mut c_void,
    array: *mut ffi::PyObject,
) {
    let _ = cpython::no_unwind(|| ours_release_any(array, EXCLUSIVE));
}
