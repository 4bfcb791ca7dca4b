//! The DLPack 1.3 C exchange API (`type(x).__dlpack_c_exchange_api__`): as a consumer, a
//! per-type cache of producers' tables used by [`PyTensor`](super::PyTensor) imports; as a
//! producer, static tables for [`DLPackTensor`] and for any frozen `#[pyclass]` implementing
//! [`IntoDLPack`](crate::IntoDLPack).
//!
//! The exchange API is a table of C function pointers that a Python type publishes in a capsule
//! named `"dlpack_exchange_api"`. A consumer that finds it calls
//! `managed_tensor_from_py_object_no_sync(obj, &out)` instead of the Python-level
//! `obj.__dlpack__(...)`: no method lookup, no keyword arguments, no capsule.
//!
//! Contract (from `dlpack.h`): every function except the allocator is called with the GIL held
//! (attached to the interpreter) and reports failure by returning -1 with a Python exception
//! set; the allocator reports through its `SetError` callback and touches no Python state. None
//! of our functions lets a panic unwind into the C caller.
//!
//! ```
//! use dlpack_rs::pyo3_glue::{exchange_api, DLPackTensor, PyTensor};
//! use pyo3::prelude::*;
//!
//! Python::initialize();
//! Python::attach(|py| -> PyResult<()> {
//!     let t = dlpack_rs::safe::Export::new(vec![1.0f32, 2.0]).versioned()?;
//!     let obj = Bound::new(py, DLPackTensor::from(t))?;
//!     // The class publishes its table...
//!     let api = obj.get_type().getattr("__dlpack_c_exchange_api__")?;
//!     assert_eq!(api.cast::<pyo3::types::PyCapsule>()?.pointer_checked(Some(c"dlpack_exchange_api"))?.as_ptr(),
//!                exchange_api::<DLPackTensor>() as *const _ as *mut _);
//!     // ...and PyTensor imports through it.
//!     let imported = PyTensor::from_pyany(py, obj.as_any())?;
//!     assert_eq!(imported.as_slice::<f32>()?, &[1.0, 2.0]);
//!     Ok(())
//! })
//! .unwrap();
//! ```

use alloc::ffi::CString;
use alloc::vec::Vec;
use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr::NonNull;
use std::sync::Mutex;

use pyo3::exceptions::{PyBufferError, PySystemError, PyValueError};
use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::types::{PyCapsule, PyType};
use pyo3::{Borrowed, PyClass};

use super::tensor::DLPackTensor;
use crate::ffi::{
    DLDataType, DLDevice, DLDeviceType, DLManagedTensorVersioned, DLPackDLTensorFromPyObjectNoSync,
    DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackSetError, DLPackVersion, DLTensor,
    DLPACK_EXCHANGE_API_CAPSULE_NAME, DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION,
};
use crate::safe::{self, cpu_device, ManagedTensorVersioned, TensorInfo, MAX_NDIM};
use crate::IntoDLPack;

// ---------------------------------------------------------------------------------------------
// Consumer side
// ---------------------------------------------------------------------------------------------

/// How many types the consumer cache remembers (round-robin replacement). Programs exchange
/// tensors of a handful of types; a miss costs one attribute look-up on the type.
const CACHE_SLOTS: usize = 8;

/// One remembered type. The strong references keep the type (whose address is the key) and
/// the capsule (which owns nothing, but may be the only thing naming the table) alive, so a
/// key can never be reused by a new type while it sits in the cache.
struct Slot {
    key: usize,
    /// The table to use, or 0 when the type has no usable exchange API.
    api: usize,
    _ty: Py<PyType>,
    _capsule: Option<Py<PyAny>>,
}

struct Cache {
    slots: [Option<Slot>; CACHE_SLOTS],
    next: usize,
}

/// Shared by all threads: a `Mutex` rather than the GIL, so that free-threaded builds are
/// correct too. No Python code runs while it is held (look-ups and reference drops happen
/// outside), so it cannot deadlock against the interpreter.
static CACHE: Mutex<Cache> = Mutex::new(Cache {
    slots: [const { None }; CACHE_SLOTS],
    next: 0,
});

/// Walks a header chain to the first table whose major version this crate reads (1.x).
///
/// # Safety
///
/// `header` must be NULL or point at a live `DLPackExchangeAPIHeader` whose `prev_api` chain
/// consists of live headers (the producer's tables are static).
unsafe fn select_table(mut header: *const DLPackExchangeAPIHeader) -> *const DLPackExchangeAPI {
    // A bound on the walk, in case a broken producer links its tables in a cycle.
    for _ in 0..16 {
        if header.is_null() {
            break;
        }
        // SAFETY: non-NULL and live by this function's contract.
        let h = unsafe { &*header };
        if h.version.major == DLPACK_MAJOR_VERSION {
            let api = header.cast::<DLPackExchangeAPI>();
            // SAFETY: a 1.x header starts a full DLPackExchangeAPI (newer minors only append).
            if unsafe { (*api).managed_tensor_from_py_object_no_sync.is_some() } {
                return api;
            }
            return core::ptr::null();
        }
        header = h.prev_api;
    }
    core::ptr::null()
}

/// The exchange table of `obj`'s type, if it has one this crate can use (cached per type).
fn lookup(obj: &Bound<'_, PyAny>) -> Option<&'static DLPackExchangeAPI> {
    let key = obj.get_type_ptr() as usize;
    {
        let cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        for slot in cache.slots.iter().flatten() {
            if slot.key == key {
                // SAFETY: a non-zero `api` was selected from a producer's static table chain,
                // which lives for the rest of the process (the dlpack.h contract).
                return unsafe { (slot.api as *const DLPackExchangeAPI).as_ref() };
            }
        }
    }
    let py = obj.py();
    let ty = obj.get_type();
    let capsule = ty
        .getattr(pyo3::intern!(py, "__dlpack_c_exchange_api__"))
        .ok();
    let api = capsule
        .as_ref()
        .and_then(|c| c.cast::<PyCapsule>().ok())
        .and_then(|c| {
            c.pointer_checked(Some(DLPACK_EXCHANGE_API_CAPSULE_NAME))
                .ok()
        })
        // SAFETY: a "dlpack_exchange_api" capsule points at a producer's static table, which
        // starts with a header whose prev_api chain is static too.
        .map(|p| unsafe { select_table(p.as_ptr().cast()) })
        .unwrap_or(core::ptr::null());
    if capsule.is_none() {
        // The failed getattr left nothing set (`ok()` took the error), but be explicit.
        let _ = PyErr::take(py);
    }
    let evicted = {
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have filled the slot meanwhile: keep one entry per type.
        if cache.slots.iter().flatten().any(|s| s.key == key) {
            None
        } else {
            let i = cache.next;
            cache.next = (i + 1) % CACHE_SLOTS;
            cache.slots[i].replace(Slot {
                key,
                api: api as usize,
                _ty: ty.unbind(),
                _capsule: capsule.map(Bound::unbind),
            })
        }
    };
    // Dropped with the lock released: a type's deallocation may run arbitrary Python code.
    drop(evicted);
    // SAFETY: as for a cache hit.
    unsafe { api.as_ref() }
}

/// Imports `obj` through its type's exchange API, if it has one: `Ok(None)` when it has none
/// (the caller falls back to `__dlpack__`), `Err` when the producer raised.
pub(crate) fn import(obj: &Bound<'_, PyAny>) -> PyResult<Option<ManagedTensorVersioned>> {
    let Some(api) = lookup(obj) else {
        return Ok(None);
    };
    let Some(from_py) = api.managed_tensor_from_py_object_no_sync else {
        return Ok(None);
    };
    let py = obj.py();
    let mut out: *mut DLManagedTensorVersioned = core::ptr::null_mut();
    // SAFETY: `from_py` comes from the table of `obj`'s own type, called as dlpack.h says: with
    // the GIL held (we hold `py`), a live object of that type, and a valid out pointer.
    let rc = unsafe { from_py(obj.as_ptr().cast(), &mut out) };
    if rc != 0 {
        return Err(PyErr::take(py).unwrap_or_else(|| {
            PySystemError::new_err(
                "__dlpack_c_exchange_api__: managed_tensor_from_py_object_no_sync failed \
                 without setting an exception",
            )
        }));
    }
    if out.is_null() {
        return Err(PySystemError::new_err(
            "__dlpack_c_exchange_api__: managed_tensor_from_py_object_no_sync returned NULL",
        ));
    }
    // SAFETY: on success the producer hands us an owned, valid managed tensor; from_raw checks
    // the major version before anything else and calls the deleter on any error.
    // An unsupported major version becomes BufferError (the safe layer's conversion).
    let tensor = unsafe { ManagedTensorVersioned::from_raw(out) }?;
    Ok(Some(tensor))
}

// ---------------------------------------------------------------------------------------------
// Producer side
// ---------------------------------------------------------------------------------------------

/// Runs the body of one of our `extern "C"` functions: a `PyErr` is restored as the pending
/// Python exception and a panic becomes a `PanicException`; both return -1.
///
/// # Safety
///
/// The calling thread must be attached to the interpreter (hold the GIL): the contract under
/// which a consumer calls every exchange function but the allocator.
unsafe fn guarded(f: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    // SAFETY: forwarded from this function's contract.
    let py = unsafe { Python::assume_attached() };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(py))) {
        Ok(Ok(())) => 0,
        Ok(Err(err)) => {
            err.restore(py);
            -1
        }
        Err(payload) => {
            // Dropping the payload is user code too: keep it from unwinding.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
            PanicException::new_err("a Rust panic in a DLPack exchange API function").restore(py);
            -1
        }
    }
}

/// Exports a frozen pyclass instance as a versioned managed tensor whose keepalive is the
/// object itself (the zero-copy `__dlpack__(max_version=(1, 3))`).
fn export_object<T>(obj: &Bound<'_, T>) -> PyResult<NonNull<DLManagedTensorVersioned>>
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    let (info, read_only, keepalive) = super::export::object_export(obj);
    let flags = if read_only {
        DLPACK_FLAG_BITMASK_READ_ONLY
    } else {
        0
    };
    // The keepalive holds the frozen object that owns the memory `info` describes (the
    // IntoDLPack contract); a frozen class is never mutably borrowed, so it stays in place.
    let ptr = safe::try_pack_versioned(keepalive, info, flags)?;
    // SAFETY: try_pack_versioned never returns NULL on success.
    Ok(unsafe { NonNull::new_unchecked(ptr) })
}

/// `managed_tensor_from_py_object_no_sync` for class `T`.
unsafe extern "C" fn from_py_object<T>(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    // SAFETY: dlpack.h calls this with the GIL held.
    unsafe {
        guarded(|py| {
            if py_object.is_null() || out.is_null() {
                return Err(PyValueError::new_err(
                    "managed_tensor_from_py_object_no_sync: NULL argument",
                ));
            }
            // SAFETY: the caller passes a live Python object (borrowed for the call).
            let obj = Borrowed::from_ptr(py, py_object.cast::<ffi::PyObject>());
            let obj = obj.cast::<T>().map_err(PyErr::from)?;
            let ptr = export_object(&obj)?;
            // SAFETY: `out` is a valid, non-NULL out pointer (checked above).
            *out = ptr.as_ptr();
            Ok(())
        })
    }
}

/// `managed_tensor_to_py_object_no_sync`: wraps the tensor in a new `dlpack_rs.Tensor`.
unsafe extern "C" fn to_py_object(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    // SAFETY: dlpack.h calls this with the GIL held.
    unsafe {
        guarded(|py| {
            // SAFETY: the caller hands over ownership of a valid managed tensor (or NULL);
            // from here on `owned` calls the deleter exactly once, on every path.
            let owned = ManagedTensorVersioned::from_raw(tensor)?;
            if out_py_object.is_null() {
                return Err(PyValueError::new_err(
                    "managed_tensor_to_py_object_no_sync: NULL out pointer",
                ));
            }
            let obj = Bound::new(py, DLPackTensor::new(owned))?;
            // SAFETY: checked non-NULL above; the new reference goes to the caller.
            *out_py_object = obj.into_ptr().cast();
            Ok(())
        })
    }
}

/// `dltensor_from_py_object_no_sync` for `dlpack_rs.Tensor`: a borrowed view of the owned
/// tensor, valid while the object lives. Read-only tensors are refused (a bare `DLTensor`
/// cannot say "read-only").
unsafe extern "C" fn dltensor_view(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    // SAFETY: dlpack.h calls this with the GIL held.
    unsafe {
        guarded(|py| {
            if py_object.is_null() || out.is_null() {
                return Err(PyValueError::new_err(
                    "dltensor_from_py_object_no_sync: NULL argument",
                ));
            }
            // SAFETY: the caller passes a live Python object (borrowed for the call).
            let obj = Borrowed::from_ptr(py, py_object.cast::<ffi::PyObject>());
            let obj = obj.cast::<DLPackTensor>().map_err(PyErr::from)?;
            let view = obj.get().view();
            if view.is_read_only() {
                return Err(PyBufferError::new_err(
                    "a read-only tensor cannot be lent as a bare DLTensor",
                ));
            }
            // SAFETY: `out` is valid (checked above). The copied struct points at shape and
            // strides owned by the object's managed tensor, alive as long as the object.
            *out = *view.raw();
            Ok(())
        })
    }
}

/// `current_work_stream`: our tensors carry no stream; NULL (the default stream) for every
/// device, which for the CPU means "nothing to synchronise".
unsafe extern "C" fn current_work_stream(
    _device_type: DLDeviceType,
    _device_id: i32,
    out_current_stream: *mut *mut c_void,
) -> c_int {
    if !out_current_stream.is_null() {
        // SAFETY: a non-NULL out pointer from the caller.
        unsafe { *out_current_stream = core::ptr::null_mut() };
    }
    0
}

/// 64-byte aligned storage unit for allocated tensors.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk([u8; 64]);

/// Allocates a zeroed, compact CPU tensor shaped like `prototype`.
///
/// # Safety
///
/// `prototype` is NULL or points at a `DLTensor` whose shape holds `ndim` values.
unsafe fn allocate_like(
    prototype: *const DLTensor,
) -> Result<*mut DLManagedTensorVersioned, (&'static CStr, CString)> {
    let msg = |s: &str| CString::new(s).unwrap_or_default();
    // SAFETY: NULL or valid, by this function's contract.
    let Some(p) = (unsafe { prototype.as_ref() }) else {
        return Err((c"ValueError", msg("prototype is NULL")));
    };
    if p.device != cpu_device() {
        return Err((
            c"BufferError",
            msg(&format!(
                "this allocator only allocates CPU memory, not {:?}:{}",
                p.device.device_type, p.device.device_id
            )),
        ));
    }
    if p.ndim < 0 || p.ndim as usize > MAX_NDIM || (p.ndim > 0 && p.shape.is_null()) {
        return Err((c"ValueError", msg("prototype has an invalid ndim or shape")));
    }
    let shape: Vec<i64> = if p.ndim == 0 {
        Vec::new()
    } else {
        // SAFETY: non-NULL and `ndim` long, by this function's contract.
        unsafe { core::slice::from_raw_parts(p.shape, p.ndim as usize) }.to_vec()
    };
    let dtype: DLDataType = p.dtype;
    // Validate the metadata before sizing anything (negative extents, overflow, bad dtype).
    let probe = TensorInfo::contiguous(
        NonNull::<Chunk>::dangling().as_ptr().cast(),
        cpu_device(),
        dtype,
        shape,
    );
    let numel = probe
        .numel()
        .map_err(|e| (c"ValueError", msg(&e.to_string())))?;
    let bits = safe::element_bits(dtype) as u128;
    let nbytes = (numel as u128 * bits).div_ceil(8);
    let chunks = usize::try_from(nbytes.div_ceil(64))
        .map_err(|_| (c"MemoryError", msg("tensor too large")))?
        .max(1);
    let mut storage: Vec<Chunk> = Vec::new();
    storage
        .try_reserve_exact(chunks)
        .map_err(|_| (c"MemoryError", msg("out of memory allocating the tensor")))?;
    storage.resize(chunks, Chunk([0; 64]));
    let info = TensorInfo {
        data: storage.as_mut_ptr().cast(),
        ..probe
    };
    safe::try_pack_versioned(storage, info, 0).map_err(|e| (c"ValueError", msg(&e.to_string())))
}

/// `managed_tensor_allocator`: a zeroed, compact, 64-byte aligned CPU tensor. Touches no
/// Python state; errors go through `set_error`.
unsafe extern "C" fn allocator(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: DLPackSetError,
) -> c_int {
    let result = std::panic::catch_unwind(|| {
        if out.is_null() {
            return Err((c"ValueError", CString::from(c"out is NULL")));
        }
        // SAFETY: the caller passes NULL or a valid prototype (the dlpack.h contract).
        unsafe { allocate_like(prototype) }
    });
    let (kind, message) = match result {
        Ok(Ok(ptr)) => {
            // SAFETY: `out` is non-NULL (checked inside the closure).
            unsafe { *out = ptr };
            return 0;
        }
        Ok(Err(e)) => e,
        Err(payload) => {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
            (
                c"RuntimeError",
                CString::from(c"a Rust panic in the DLPack allocator"),
            )
        }
    };
    if let Some(set_error) = set_error {
        let report = std::panic::AssertUnwindSafe(|| {
            // SAFETY: the consumer's callback, called with its own context and two
            // NUL-terminated strings that outlive the call.
            unsafe { set_error(error_ctx, kind.as_ptr(), message.as_ptr().cast::<c_char>()) }
        });
        let _ = std::panic::catch_unwind(report);
    }
    -1
}

/// A `DLPackExchangeAPI` in a `static`: the table is immutable and its only pointer
/// (`prev_api`) is NULL, so sharing it between threads is sound.
#[repr(transparent)]
struct StaticApi(DLPackExchangeAPI);

// SAFETY: the table is never written after initialisation; its pointer field is NULL and its
// function pointers are plain code addresses.
unsafe impl Sync for StaticApi {}

const fn table<T>(dltensor: DLPackDLTensorFromPyObjectNoSync) -> DLPackExchangeAPI
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    DLPackExchangeAPI {
        header: DLPackExchangeAPIHeader {
            version: DLPackVersion::CURRENT,
            prev_api: core::ptr::null_mut(),
        },
        managed_tensor_allocator: Some(allocator),
        managed_tensor_from_py_object_no_sync: Some(from_py_object::<T>),
        managed_tensor_to_py_object_no_sync: Some(to_py_object),
        dltensor_from_py_object_no_sync: dltensor,
        current_work_stream: Some(current_work_stream),
    }
}

static TENSOR_API: StaticApi = StaticApi(table::<DLPackTensor>(Some(dltensor_view)));

/// Tables of user classes: one per class, a promoted constant (static storage).
struct Tables<T>(core::marker::PhantomData<T>);

impl<T> Tables<T>
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    const API: StaticApi = StaticApi(table::<T>(None));
}

/// The static exchange table of class `T`: `managed_tensor_from_py_object_no_sync` exports an
/// instance zero-copy (versioned 1.3, `READ_ONLY` when [`IntoDLPack::is_read_only`]), keeping
/// it alive until the consumer's deleter call; `managed_tensor_to_py_object_no_sync` wraps a
/// tensor in a [`DLPackTensor`]; the allocator makes zeroed CPU tensors; the work stream is
/// NULL. `dltensor_from_py_object_no_sync` is provided for [`DLPackTensor`] only (NULL for
/// other classes, whose metadata is computed per call and could not outlive it).
pub fn exchange_api<T>() -> &'static DLPackExchangeAPI
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync + 'static,
{
    if core::any::TypeId::of::<T>() == core::any::TypeId::of::<DLPackTensor>() {
        return &TENSOR_API.0;
    }
    let api: &'static StaticApi = &Tables::<T>::API;
    &api.0
}

/// The `__dlpack_c_exchange_api__` class attribute of class `T`: a `"dlpack_exchange_api"`
/// capsule pointing at [`exchange_api::<T>()`](exchange_api). `#[derive(IntoDLPack)]` adds it;
/// a hand-written class adds it as a `#[classattr]`:
///
/// ```
/// # use dlpack_rs::pyo3_glue::{exchange_api_capsule, IntoDLPack};
/// # use dlpack_rs::safe::TensorInfo;
/// # use pyo3::prelude::*;
/// # use pyo3::types::PyCapsule;
/// #[pyclass(frozen)]
/// struct Image { pixels: Vec<u8> }
/// # impl IntoDLPack for Image {
/// #     fn tensor_info(&self) -> TensorInfo { unimplemented!() }
/// # }
///
/// #[pymethods]
/// impl Image {
///     #[classattr]
///     fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
///         exchange_api_capsule::<Self>(py)
///     }
/// }
/// ```
pub fn exchange_api_capsule<T>(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>>
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync + 'static,
{
    let api = NonNull::from(exchange_api::<T>()).cast::<c_void>();
    // SAFETY: the table is static and immutable; consumers only read it. No destructor: the
    // capsule owns nothing.
    unsafe { PyCapsule::new_with_pointer(py, api, DLPACK_EXCHANGE_API_CAPSULE_NAME) }
}

/// Whether `device` is the plain CPU (the only device on which an import through the exchange
/// API needs no stream synchronisation).
pub(crate) fn is_cpu(device: DLDevice) -> bool {
    device.device_type == DLDeviceType::CPU
}
