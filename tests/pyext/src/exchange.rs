//! Test probes for the DLPack 1.3 C exchange API: a class whose exchange calls and
//! `__dlpack__` calls are counted, test tables (counting, newer major with and without an
//! older table in `prev_api`, failing), and imports with the exchange API on or off.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_rs::ffi::{
    DLManagedTensorVersioned, DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackVersion,
    DLPACK_EXCHANGE_API_CAPSULE_NAME,
};
use dlpack_rs::pyo3_glue::{DLPackTensor, ImportOptions, IntoDLPack, PyTensor};
use dlpack_rs::safe::{cpu_device, dtype_f32, TensorInfo};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

static C_CALLS: AtomicUsize = AtomicUsize::new(0);
static PY_CALLS: AtomicUsize = AtomicUsize::new(0);
static PROBE_DROPS: AtomicUsize = AtomicUsize::new(0);

/// A float32 vector whose `__dlpack__` calls are counted; Python subclasses pick a test table
/// by overriding `__dlpack_c_exchange_api__` with `probe_api(kind)`.
#[pyclass(frozen, subclass)]
struct Probe {
    data: Vec<f32>,
}

impl Drop for Probe {
    fn drop(&mut self) {
        PROBE_DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: the Vec's heap buffer holds `data.len()` f32s and never moves; `as_ptr` takes the
// pointer without a reference to the elements.
unsafe impl IntoDLPack for Probe {
    fn tensor_info(&self) -> TensorInfo {
        TensorInfo::contiguous(
            self.data.as_ptr().cast_mut().cast(),
            cpu_device(),
            dtype_f32(),
            vec![self.data.len() as i64],
        )
    }
}

#[pymethods]
impl Probe {
    #[new]
    fn py_new(data: Vec<f32>) -> Self {
        Probe { data }
    }

    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        PY_CALLS.fetch_add(1, Ordering::SeqCst);
        crate::producer::export_frozen(slf, stream, max_version, dl_device, copy)
    }

    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        dlpack_rs::__private_derive_v0_4::export_dlpack_device(self)
    }

    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
        api_capsule(py, &COUNTING.0)
    }

    fn data_ptr(&self) -> usize {
        self.data.as_ptr() as usize
    }
}

/// Counts the call, then exports through the library's own table for `Probe`.
unsafe extern "C" fn counting_from_py(
    obj: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    C_CALLS.fetch_add(1, Ordering::SeqCst);
    let real = dlpack_rs::__private_derive_v0_4::exchange_api::<Probe>()
        .managed_tensor_from_py_object_no_sync
        .expect("the library table has from_py_object");
    // SAFETY: forwarded unchanged from our own caller, who follows the same contract.
    unsafe { real(obj, out) }
}

/// Counts the call and fails with a ValueError, as a producer that cannot export would.
unsafe extern "C" fn failing_from_py(
    _obj: *mut c_void,
    _out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    C_CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: dlpack.h calls this with the GIL held.
    let py = unsafe { Python::assume_attached() };
    PyValueError::new_err("probe: export refused").restore(py);
    -1
}

/// Counts the call and returns -1 without setting an exception (a broken producer).
unsafe extern "C" fn silent_failure_from_py(
    _obj: *mut c_void,
    _out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    C_CALLS.fetch_add(1, Ordering::SeqCst);
    -1
}

#[repr(transparent)]
struct Table(DLPackExchangeAPI);
// SAFETY: immutable tables whose pointers are NULL or point at other immutable statics.
unsafe impl Sync for Table {}

const fn with(
    version: DLPackVersion,
    prev_api: *mut DLPackExchangeAPIHeader,
    from_py: unsafe extern "C" fn(*mut c_void, *mut *mut DLManagedTensorVersioned) -> c_int,
) -> Table {
    Table(DLPackExchangeAPI {
        header: DLPackExchangeAPIHeader { version, prev_api },
        managed_tensor_allocator: None,
        managed_tensor_from_py_object_no_sync: Some(from_py),
        managed_tensor_to_py_object_no_sync: None,
        dltensor_from_py_object_no_sync: None,
        current_work_stream: None,
    })
}

const V1_3: DLPackVersion = DLPackVersion { major: 1, minor: 3 };
const V2_0: DLPackVersion = DLPackVersion { major: 2, minor: 0 };

static COUNTING: Table = with(V1_3, std::ptr::null_mut(), counting_from_py);
static V2_CHAIN: Table = with(
    V2_0,
    &COUNTING.0.header as *const DLPackExchangeAPIHeader as *mut DLPackExchangeAPIHeader,
    failing_from_py,
);
static V2_ONLY: Table = with(V2_0, std::ptr::null_mut(), failing_from_py);
static FAILING: Table = with(V1_3, std::ptr::null_mut(), failing_from_py);
static SILENT: Table = with(V1_3, std::ptr::null_mut(), silent_failure_from_py);

fn api_capsule<'py>(
    py: Python<'py>,
    api: &'static DLPackExchangeAPI,
) -> PyResult<Bound<'py, PyCapsule>> {
    // SAFETY: the table is a static; the capsule owns nothing.
    unsafe {
        PyCapsule::new_with_pointer(
            py,
            NonNull::from(api).cast::<c_void>(),
            DLPACK_EXCHANGE_API_CAPSULE_NAME,
        )
    }
}

/// A `"dlpack_exchange_api"` capsule for one of the test tables: `counting` (1.3, counts and
/// exports), `v2_chain` (2.0 whose `prev_api` is `counting`), `v2_only` (2.0, no older table),
/// `failing` (1.3, raises ValueError), `silent` (1.3, fails without an exception).
#[pyfunction]
fn probe_api<'py>(py: Python<'py>, kind: &str) -> PyResult<Bound<'py, PyCapsule>> {
    let table = match kind {
        "counting" => &COUNTING,
        "v2_chain" => &V2_CHAIN,
        "v2_only" => &V2_ONLY,
        "failing" => &FAILING,
        "silent" => &SILENT,
        _ => return Err(PyValueError::new_err(format!("unknown table {kind}"))),
    };
    api_capsule(py, &table.0)
}

/// (exchange calls, `__dlpack__` calls, Probe objects dropped).
#[pyfunction]
fn probe_counters() -> (usize, usize, usize) {
    (
        C_CALLS.load(Ordering::SeqCst),
        PY_CALLS.load(Ordering::SeqCst),
        PROBE_DROPS.load(Ordering::SeqCst),
    )
}

/// Imports `obj` with the exchange API on or off and describes what arrived.
#[pyfunction]
#[pyo3(signature = (obj, *, exchange_api=true))]
fn import_info<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    exchange_api: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let t = ImportOptions::new()
        .exchange_api(exchange_api)
        .import(obj)?;
    let d = PyDict::new(py);
    d.set_item("data_ptr", t.data_ptr() as usize)?;
    d.set_item("shape", t.shape().to_vec())?;
    d.set_item("versioned", t.is_versioned())?;
    d.set_item("read_only", t.is_read_only())?;
    d.set_item("device", (t.device().device_type.0, t.device().device_id))?;
    if let Some(v) = t.as_versioned() {
        let version = v.version();
        d.set_item("version", (version.major, version.minor))?;
    }
    d.set_item("strides", t.raw_strides().map(<[i64]>::to_vec))?;
    let dtype = t.dtype();
    d.set_item("dtype", (dtype.code.0, dtype.bits, dtype.lanes))?;
    d.set_item("flags", t.flags())?;
    d.set_item("byte_offset", t.byte_offset())?;
    Ok(d)
}

/// An imported tensor held until `release()`: for deleter counting.
#[pyclass(frozen)]
struct Holding(std::sync::Mutex<Option<PyTensor>>);

#[pymethods]
impl Holding {
    fn release(&self) {
        drop(self.0.lock().map(|mut g| g.take()));
    }
}

/// Imports `obj` (exchange API on by default) and holds it.
#[pyfunction]
#[pyo3(signature = (obj, *, exchange_api=true))]
fn hold_import(obj: &Bound<'_, PyAny>, exchange_api: bool) -> PyResult<Holding> {
    let t = ImportOptions::new()
        .exchange_api(exchange_api)
        .import(obj)?;
    Ok(Holding(std::sync::Mutex::new(Some(t))))
}

/// Round trip through a class's own table: from_py_object, then to_py_object, giving a
/// `dlpack_rs.Tensor` over the same memory.
#[pyfunction]
fn table_round_trip<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let capsule = obj.get_type().getattr("__dlpack_c_exchange_api__")?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let api = capsule.pointer_checked(Some(DLPACK_EXCHANGE_API_CAPSULE_NAME))?;
    // SAFETY: a "dlpack_exchange_api" capsule points at a static table starting with a header.
    let api = unsafe { &*api.as_ptr().cast::<DLPackExchangeAPI>() };
    if api.header.version.major != 1 {
        return Err(PyRuntimeError::new_err("unexpected major version"));
    }
    let (Some(from_py), Some(to_py)) = (
        api.managed_tensor_from_py_object_no_sync,
        api.managed_tensor_to_py_object_no_sync,
    ) else {
        return Err(PyRuntimeError::new_err("missing functions"));
    };
    let mut mt = std::ptr::null_mut();
    // SAFETY: the GIL is held, `obj` is of the table's type, `mt` is a valid out pointer.
    if unsafe { from_py(obj.as_ptr().cast(), &mut mt) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let mut out = std::ptr::null_mut();
    // SAFETY: `mt` is an owned managed tensor, handed over; `out` is a valid out pointer.
    if unsafe { to_py(mt, &mut out) } != 0 {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: on success `out` is a new reference to a Python object.
    Ok(unsafe { Bound::from_owned_ptr(py, out.cast()) })
}

/// Whether `obj` is a `dlpack_rs.Tensor`.
#[pyfunction]
fn is_dlpack_tensor(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<DLPackTensor>()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Probe>()?;
    m.add_class::<Holding>()?;
    m.add_function(wrap_pyfunction!(probe_api, m)?)?;
    m.add_function(wrap_pyfunction!(probe_counters, m)?)?;
    m.add_function(wrap_pyfunction!(import_info, m)?)?;
    m.add_function(wrap_pyfunction!(hold_import, m)?)?;
    m.add_function(wrap_pyfunction!(table_round_trip, m)?)?;
    m.add_function(wrap_pyfunction!(is_dlpack_tensor, m)?)?;
    Ok(())
}
