//! Borrows shared with rust-numpy: each view of an imported numpy array also takes the matching
//! borrow in rust-numpy's table (ours, from `table.rs`, if none was published). See SAFETY.md.

use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyTuple};

use super::table::{key_of_array, key_of_layout, Shared, OURS};
use crate::pyo3_glue::numpy::array::{
    known_ndarray, root_array, ArrayFields, NDARRAY, NDARRAY_PTR, NPY_ARRAY_C_CONTIGUOUS,
    NPY_ARRAY_F_CONTIGUOUS,
};
use crate::pyo3_glue::runtime::cpython;
use crate::pyo3_glue::runtime::keepalive::{
    exiting_unattached, release_owned, this_thread_is_attached,
};
use crate::safe::borrow::overlap::Span;
use crate::safe::Error;

const NAME: &core::ffi::CStr = c"_RUST_NUMPY_BORROW_CHECKING_API";

/// The process's table once found (alive for good), its low bit set if [`marks`] says it is ours.
static TABLE: AtomicPtr<Shared> = AtomicPtr::new(core::ptr::null_mut());

fn found_table() -> Option<&'static Shared> {
    // SAFETY: NULL, or a table of version >= 1 that lives for good (`table`), mark bit cleared.
    unsafe { TABLE.load(Ordering::Acquire).map_addr(|a| a & !1).as_ref() }
}

/// The capsule that marks a published table as a copy of this crate's (it points at the table).
const MARK: &core::ffi::CStr = c"dlpack_rs._registry_numpy_borrows";

/// Whether `table` (rust-numpy's capsule in `module`) is this crate's: the mark names it.
fn marks(module: &Bound<'_, PyModule>, table: &Bound<'_, PyCapsule>) -> bool {
    let py = module.py();
    let Ok(mark) = module.getattr(pyo3::intern!(py, "_DLPACK_RS_REGISTRY_BORROWS")) else {
        return false;
    };
    let Ok(mark) = mark.cast_into::<PyCapsule>() else {
        return false;
    };
    match (
        mark.pointer_checked(Some(MARK)),
        table.pointer_checked(Some(NAME)),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
fn multiarray(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    // Where rust-numpy keeps its table, found by numpy's version as rust-numpy does (same table).
    let major = crate::pyo3_glue::numpy::array::numpy_major(py.import("numpy")?.as_any());
    py.import(if major.unwrap_or(2) >= 2 {
        "numpy._core.multiarray"
    } else {
        "numpy.core.multiarray"
    })
}

/// rust-numpy's table: the one some module published, or ours, published now.
fn table(py: Python<'_>) -> PyResult<&'static Shared> {
    if let Some(found) = found_table() {
        return Ok(found);
    }
    // Idempotent: a re-entered or racing look-up finds the table the first one published.
    let table = (|| -> PyResult<*mut Shared> {
        let module = multiarray(py)?;
        let name = pyo3::intern!(py, "_RUST_NUMPY_BORROW_CHECKING_API");
        let dict = module.dict();
        let capsule = match dict.get_item(name)? {
            Some(found) => found,
            None => {
                // SAFETY: `OURS` is a static; the capsules have no destructor and static names.
                let (capsule, mark) = unsafe {
                    let ours = core::ptr::NonNull::from(&OURS).cast();
                    (
                        PyCapsule::new_with_pointer(py, ours, NAME)?,
                        PyCapsule::new_with_pointer(py, ours, MARK)?,
                    )
                };
                // Each inserted only where absent (what is there is adopted); the mark first, so a
                // copy finding our table finds it marked.
                dict.set_default(pyo3::intern!(py, "_DLPACK_RS_REGISTRY_BORROWS"), &mark)?;
                dict.set_default_with_result(name, &capsule)?.1
            }
        };
        let capsule = capsule.cast_into::<PyCapsule>()?;
        let registry_backed = marks(&module, &capsule);
        let ptr = capsule
            .pointer_checked(Some(NAME))?
            .as_ptr()
            .cast::<Shared>();
        // SAFETY: every version of the table starts with its version (a u64).
        let version = unsafe { ptr.cast::<u64>().read() };
        if version < 1 {
            return Err(PyTypeError::new_err(format!(
                "rust-numpy's borrow checking table has version {version}, which this crate \
                 cannot share borrows with"
            )));
        }
        // The table must outlive every use: keep the capsule (and so the table) for good.
        core::mem::forget(capsule);
        Ok(ptr.map_addr(|a| a | usize::from(registry_backed)))
    })()?;
    // A failed look-up stores nothing; a racing one found the same table, and the first kept.
    let kept = match TABLE.compare_exchange(
        core::ptr::null_mut(),
        table,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => table,
        Err(first) => first,
    };
    // SAFETY: a table of version >= 1 that lives for good (above), mark bit cleared.
    Ok(unsafe { &*kept.map_addr(|a| a & !1) })
}

/// Whether the process's table (found already) is a copy of this crate's.
fn registry_backed() -> bool {
    let table = TABLE.load(Ordering::Acquire);
    !table.is_null() && (core::ptr::eq(table, &OURS) || table.addr() & 1 != 0)
}

/// The interpreter every coordinated array belongs to (pyo3 loads no sub-interpreter).
const MAIN_INTERPRETER: i64 = 0;

/// Makes every view of `tensor` take rust-numpy's borrow of `obj`, if a numpy array (answered).
pub(crate) fn coordinate(
    obj: &Bound<'_, PyAny>,
    tensor: &mut crate::safe::AnyManaged,
) -> PyResult<bool> {
    let Some(ndarray) = known_ndarray(obj)? else {
        return Ok(false);
    };
    // SAFETY: attached; both live (`NDARRAY` keeps numpy's type for good).
    let is_array = unsafe { cpython::type_check(obj.as_ptr(), ndarray) };
    if !is_array {
        return Ok(false);
    }
    if registry_backed() {
        return Ok(true);
    }
    let key = || {
        key_of_layout(
            tensor.data_ptr(),
            tensor.shape(),
            &tensor.strides(),
            tensor.dtype(),
        )
    };
    if let Some(external) = external_for(obj, key, Foreign::Uncoordinated)? {
        // SAFETY: `external_for`'s context, owned by this owner alone.
        unsafe { tensor.set_external(external) };
    }
    Ok(true)
}

/// As [`coordinate`], for a non-owning view `direct::view` made of the array `obj`'s own struct.
pub(crate) fn coordinate_view(
    obj: &Bound<'_, PyAny>,
    view: &mut crate::safe::Described,
) -> PyResult<()> {
    let key = || key_of_layout(view.data_ptr(), view.shape(), &view.strides(), view.dtype());
    if let Some(external) = external_for(obj, key, Foreign::Refused)? {
        // SAFETY: `external_for`'s context, owned by this view alone.
        unsafe { view.set_external(external) };
    }
    Ok(())
}

/// What [`external_for`] does with bytes that lie wholly outside the memory of `obj`'s base.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Foreign {
    /// Nothing (`None`): an import that a subclass's `__dlpack__` made of other memory.
    Uncoordinated,
    /// `BufferError`: a view of the array's own struct cannot address such bytes.
    Refused,
}

/// The context of rust-numpy's borrows of `key`'s bytes in the numpy array `obj`, if needed.
fn external_for(
    obj: &Bound<'_, PyAny>,
    key: impl FnOnce() -> Option<Span>,
    foreign: Foreign,
) -> PyResult<Option<crate::safe::External>> {
    let py = obj.py();
    if found_table().is_none() {
        // SAFETY: `obj`'s token, on a thread importing an argument: attached (as for
        // `PyKeepalive::new`).
        if unsafe { cpython::interpreter_id() } != MAIN_INTERPRETER {
            return Ok(None);
        }
        table(py)?;
    }
    if registry_backed() {
        return Ok(None);
    }
    // rust-numpy keys a borrow by the array's layout at take and at release, which Python may
    // change in place: borrows are taken on private arrays of `obj`'s base, as 1-D uint8 (its
    // overlap rule ignores element width; gcd 1 makes any overlap conflict).
    let key = key().ok_or_else(|| {
        pyo3::exceptions::PyBufferError::new_err(
            "cannot take rust-numpy's borrow of this array: it addresses memory beyond the \
             address space",
        )
    })?;
    let Some(bytes) = byte_view(obj, &key, foreign)? else {
        return Ok(None);
    };
    // rust-numpy gives a 0-d array an empty range at its element, meeting only another 0-d key
    // at that address: every view is also borrowed as a 0-d array of its first byte (meeting
    // `x[0, ...]`); a 0-d array past the first byte lies inside the bytes' range.
    let array0 = if bytes.len()? > 0 {
        let first = bytes.get_item(pyo3::types::PySlice::new(py, 0, 1, 1))?;
        first
            .call_method1(pyo3::intern!(py, "reshape"), (PyTuple::empty(py),))?
            .into_ptr()
    } else {
        core::ptr::null_mut()
    };
    // What `set_external` asks of its caller: the context owns strong references to live numpy
    // arrays of the main interpreter, valid until `drop_ctx` releases them.
    Ok(Some(Ctx::external(bytes.into_ptr(), array0)))
}

/// The bytes `key` names, as a private 1-D `uint8` slice of a flat view of `obj`'s base array.
fn byte_view<'py>(
    obj: &Bound<'py, PyAny>,
    key: &Span,
    foreign: Foreign,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = obj.py();
    // SAFETY: attached; the caller checked `obj` is a live numpy array, so numpy's type is known.
    let root = unsafe { root_array(obj.as_ptr(), NDARRAY_PTR.load(Ordering::Acquire)) };
    // SAFETY: `root` is a live numpy array (a strong reference is taken just below).
    let root = unsafe { Bound::from_borrowed_ptr(py, root) };
    // A private plain ndarray of the root's memory (np.matrix has its own shape rules), so its
    // layout read here holds until flattened below (a flat view of a no longer contiguous array
    // would be a copy, whose borrow meets nothing).
    let ndarray_ty = NDARRAY
        .get(py)
        .ok_or_else(|| PyTypeError::new_err("numpy's ndarray type is not known"))?
        .bind(py);
    let plain = ndarray_ty.call_method1(pyo3::intern!(py, "view"), (&root, ndarray_ty))?;
    // SAFETY: `plain` is a live numpy array (just made); fields read in place, none kept.
    let (flags, root_start) = unsafe {
        let fields = &*plain.as_ptr().cast::<ArrayFields>();
        (fields.flags, fields.data as usize)
    };
    if foreign == Foreign::Uncoordinated {
        // SAFETY: `plain` is a live numpy array (just made); attached.
        if let Some(base) = unsafe { key_of_array(plain.as_ptr()) } {
            if key.end <= base.start || key.start >= base.end {
                // Outside the span the base addresses, contiguous or not: other memory.
                return Ok(None);
            }
        }
    }
    let order = if flags & NPY_ARRAY_C_CONTIGUOUS != 0 {
        pyo3::intern!(py, "C")
    } else if flags & NPY_ARRAY_F_CONTIGUOUS != 0 {
        pyo3::intern!(py, "F")
    } else {
        return Err(pyo3::exceptions::PyBufferError::new_err(
            "cannot take rust-numpy's borrow of this array: its memory belongs to a \
             non-contiguous array (np.lib.stride_tricks.as_strided, say), which rust-numpy's \
             table cannot be told about exactly; pass a copy",
        ));
    };
    // Flat in its memory order: a view, never a copy, of a contiguous array.
    let kwargs = PyDict::new(py);
    kwargs.set_item(pyo3::intern!(py, "order"), order)?;
    let flat = plain.call_method(pyo3::intern!(py, "reshape"), (-1,), Some(&kwargs))?;
    let bytes = flat.call_method1(pyo3::intern!(py, "view"), (pyo3::intern!(py, "uint8"),))?;
    let nbytes: usize = bytes.len()?;
    let (lo, hi) = (
        key.start.wrapping_sub(root_start),
        key.end.wrapping_sub(root_start),
    );
    if key.start < root_start || lo > hi || hi > nbytes {
        return Err(pyo3::exceptions::PyBufferError::new_err(
            "cannot take rust-numpy's borrow of this array: it addresses memory outside its \
             base array",
        ));
    }
    let slice = pyo3::types::PySlice::new(py, lo as isize, hi as isize, 1);
    bytes.get_item(slice).map(Some)
}

/// Gives `tensor`, an import of a `dlpack_rs.Tensor` wrapping a numpy import, its coordination.
pub(crate) fn inherit(wrapper: &Bound<'_, PyAny>, tensor: &mut crate::safe::AnyManaged) {
    let Ok(ours) = wrapper.cast::<crate::pyo3_glue::DLPackTensor>() else {
        return;
    };
    let Some(external) = ours.get().tensor().external() else {
        return;
    };
    if !core::ptr::eq(external.api, &NUMPY_API) || tensor.external().is_some() {
        return;
    }
    // SAFETY: a context `external_for` made, alive while the (held) wrapper's tensor owns it.
    let from = unsafe { &*external.ctx.cast::<Ctx>() };
    for array in [from.array, from.array0] {
        if !array.is_null() {
            // SAFETY: attached; the context's reference keeps it alive. The new one takes its own.
            unsafe { cpython::incref(array) };
        }
    }
    // SAFETY: the new context owns its own strong references to the live private views (of
    // the main interpreter), valid until `drop_ctx` releases them, owned by this owner alone.
    unsafe { tensor.set_external(Ctx::external(from.array, from.array0)) };
}

/// An import's context with rust-numpy's own table: the private views its functions are given.
struct Ctx {
    /// The private view (a strong reference).
    array: *mut ffi::PyObject,
    /// A private 0-d `uint8` array of `array`'s first byte (a strong reference), or NULL.
    array0: *mut ffi::PyObject,
}

impl Ctx {
    /// A context of these two strong references, boxed, as an `External` of rust-numpy's table.
    fn external(array: *mut ffi::PyObject, array0: *mut ffi::PyObject) -> crate::safe::External {
        crate::safe::External {
            api: &NUMPY_API,
            ctx: Box::into_raw(Box::new(Ctx { array, array0 })).cast(),
        }
    }
}

static NUMPY_API: crate::safe::ExternalApi = crate::safe::ExternalApi {
    acquire: numpy_acquire,
    release: numpy_release,
    drop_ctx: numpy_drop_ctx,
};

/// Runs `f` attached; `None` on an unattached thread once shutdown began.
fn attached<R>(f: impl FnOnce() -> R) -> Option<R> {
    if this_thread_is_attached() {
        return Some(f());
    }
    if exiting_unattached() {
        return None;
    }
    // SAFETY: not shutting down (checked above); `f` keeps nothing of Python (callers' contract).
    Some(unsafe { cpython::with_attached(f) })
}

/// `ExternalApi::acquire`: rust-numpy's `acquire` / `acquire_mut` of the array.
/// # Safety
/// `ctx` is a context `external_for` (or `inherit`) made, not yet released.
unsafe fn numpy_acquire(ctx: *mut c_void, exclusive: bool) -> Result<(), Error> {
    // SAFETY: a live context (this function's contract).
    let ctx = unsafe { &*ctx.cast::<Ctx>() };
    // Set before any context was made (`coordinate`).
    let Some(t) = found_table() else {
        return Err(Error::AlreadyBorrowed { exclusive });
    };
    let acquire = if exclusive { t.acquire_mut } else { t.acquire };
    let take = |array: *mut ffi::PyObject| {
        // SAFETY: attached; a version >= 1 table and a live array (the context's strong reference).
        attached(|| unsafe { acquire(t.flags, array) })
    };
    // A 0-d array: first rust-numpy's own borrow of it, then the one of its element.
    if !ctx.array0.is_null() {
        answer(take(ctx.array0), exclusive)?;
    }
    let taken = answer(take(ctx.array), exclusive);
    if taken.is_err() && !ctx.array0.is_null() {
        // SAFETY: gives back the borrow of `array0` taken just above.
        unsafe { foreign_release(t, ctx.array0, exclusive) };
    }
    taken
}

/// A table's answer: 0 taken, -2 not writeable, anything else refused.
fn answer(rc: Option<c_int>, exclusive: bool) -> Result<(), Error> {
    match rc {
        Some(0) => Ok(()),
        Some(-2) => Err(Error::ReadOnly),
        _ => Err(Error::AlreadyBorrowed { exclusive }),
    }
}

/// Gives back one borrow of `array` in rust-numpy's table `t`.
/// # Safety
/// `array` is a live numpy array a borrow of this kind was taken of through `t`.
unsafe fn foreign_release(t: &Shared, array: *mut ffi::PyObject, exclusive: bool) {
    // Once shutdown has begun on an unattached thread the borrow stays (it only refuses).
    let release = if exclusive { t.release_mut } else { t.release };
    // SAFETY: attached; releases a borrow taken with the same kind (the contract).
    let _ = attached(|| unsafe { release(t.flags, array) });
}

/// `ExternalApi::release`: rust-numpy's `release` / `release_mut` of the array.
/// # Safety
/// As `numpy_acquire`, for a borrow it took with the same `exclusive`.
unsafe fn numpy_release(ctx: *mut c_void, exclusive: bool) {
    // SAFETY: a live context (as in `numpy_acquire`).
    let ctx = unsafe { &*ctx.cast::<Ctx>() };
    let Some(t) = found_table() else {
        return;
    };
    // SAFETY: the borrows `numpy_acquire` took with the same kind, in reverse order.
    unsafe {
        foreign_release(t, ctx.array, exclusive);
        if !ctx.array0.is_null() {
            foreign_release(t, ctx.array0, exclusive);
        }
    }
}

/// `ExternalApi::drop_ctx`: releases the arrays, as every keepalive does, on any thread.
/// # Safety
/// `ctx` was made by `external_for` (or `inherit`) and is released once.
unsafe fn numpy_drop_ctx(ctx: *mut c_void) {
    // SAFETY: made by `Box::into_raw` in `external_for` or `inherit`, released once.
    let ctx = unsafe { Box::from_raw(ctx.cast::<Ctx>()) };
    for array in [ctx.array, ctx.array0] {
        if !array.is_null() {
            // SAFETY: a strong reference `external_for` or `inherit` took, of the main interpreter.
            unsafe { release_owned(array, MAIN_INTERPRETER) };
        }
    }
}
