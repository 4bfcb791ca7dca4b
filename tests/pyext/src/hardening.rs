//! Hardening helpers for the suite's malformed-input, soak, thread and shutdown tests: a
//! keepalive whose `Drop` panics, imports whose work (and deleter) runs with the GIL released,
//! and tensors dropped concurrently on threads that never held the GIL.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::Imported;
use dlpack_rs::pyo3_glue::{CContig, DLPackTensor, Dims, IntoDLPack, PyTensor, ANY};
use dlpack_rs::safe::{self, cpu_device, dtype_u8, ManagedTensorVersioned};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

/// Bombs dropped so far (each one panics in its `Drop`).
static BOMBS_DROPPED: AtomicUsize = AtomicUsize::new(0);

/// A keepalive owning 4 bytes whose `Drop` panics: the deleter must contain the panic.
struct Bomb(Box<[u8; 4]>);

impl Drop for Bomb {
    fn drop(&mut self) {
        BOMBS_DROPPED.fetch_add(1, Ordering::SeqCst);
        panic!("hardening: a keepalive Drop panics on purpose");
    }
}

fn bomb_info(bomb: &mut Bomb) -> safe::TensorInfo {
    safe::TensorInfo::contiguous(
        bomb.0.as_mut_ptr().cast(),
        cpu_device(),
        dtype_u8(),
        vec![4],
    )
}

fn bomb_versioned() -> PyResult<ManagedTensorVersioned> {
    let mut bomb = Bomb(Box::new([1, 2, 3, 4]));
    let info = bomb_info(&mut bomb);
    let raw = safe::try_pack_versioned(bomb, info, 0)?;
    // SAFETY: a fresh export of ours, owned here alone.
    Ok(unsafe { ManagedTensorVersioned::from_raw(raw) }?)
}

/// A `dlpack_rs.Tensor` (4 uint8) whose keepalive panics when the consumer's deleter drops it.
#[pyfunction]
fn panicking_tensor() -> PyResult<DLPackTensor> {
    Ok(DLPackTensor::new(bomb_versioned()?))
}

/// A raw capsule (4 uint8) whose keepalive panics when it is dropped: by a consumer's
/// deleter call, or by the capsule's destructor if nobody consumes it.
#[pyfunction]
fn panicking_capsule(py: Python<'_>, versioned: bool) -> PyResult<Bound<'_, PyCapsule>> {
    // Through `dlpack_rs.Tensor`: the capsule's deleter drops the tensor, whose own deleter
    // drops the bomb.
    if versioned {
        DLPackTensor::new(bomb_versioned()?).into_capsule_versioned(py)
    } else {
        DLPackTensor::new(bomb_versioned()?).into_capsule(py)
    }
}

/// How many panicking keepalives were dropped.
#[pyfunction]
fn bombs_dropped() -> usize {
    BOMBS_DROPPED.load(Ordering::SeqCst)
}

/// Imports `obj` with the GIL, then releases the GIL to sum its bytes (read through the
/// validated shape and strides) and to drop it: the producer's deleter runs on this thread
/// without the GIL.
#[pyfunction]
fn checksum_detached(py: Python<'_>, obj: Imported) -> PyResult<u64> {
    py.detach(move || {
        let sum = crate::gather(&obj).map(|bytes| bytes.iter().map(|&b| b as u64).sum());
        drop(obj);
        sum
    })
}

/// Builds a `dlpack_rs.Tensor` of `n` f64 (0, 1, 2, ...), allocating and filling the buffer
/// with the GIL released.
#[pyfunction]
fn export_detached(py: Python<'_>, n: usize) -> PyResult<DLPackTensor> {
    let export = py.detach(move || {
        let v: Vec<f64> = (0..n).map(|i| i as f64).collect();
        safe::Export::new(v).versioned()
    })?;
    Ok(DLPackTensor::new(export))
}

/// Imports every object of `objs`, then drops them spread over `threads` new threads that
/// never held the GIL, all at once, while this thread waits with the GIL released.
#[pyfunction]
fn drop_on_threads(py: Python<'_>, objs: Vec<Imported>, threads: usize) -> PyResult<()> {
    let threads = threads.max(1);
    let mut buckets: Vec<Vec<PyTensor>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, t) in objs.into_iter().enumerate() {
        buckets[i % threads].push(t.0);
    }
    py.detach(move || {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(buckets.len()));
        let handles: Vec<_> = buckets
            .into_iter()
            .map(|bucket| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    drop(bucket);
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join())
            .map_err(|_| PyRuntimeError::new_err("a dropping thread panicked"))
    })
}

/// Imports `obj` and drops it on a new thread that is never joined (it may still be running,
/// waiting for the GIL, when the interpreter shuts down).
#[pyfunction]
fn drop_on_detached_thread(obj: Imported) {
    std::thread::spawn(move || drop(obj));
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(panicking_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(panicking_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(keepalive_counts, m)?)?;
    m.add_function(wrap_pyfunction!(hand_to, m)?)?;
    m.add_function(wrap_pyfunction!(numel, m)?)?;
    m.add_function(wrap_pyfunction!(import_device, m)?)?;
    m.add_function(wrap_pyfunction!(make_device_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(start_instrumentation, m)?)?;
    m.add_function(wrap_pyfunction!(returned_torch, m)?)?;
    m.add_function(wrap_pyfunction!(count_export, m)?)?;
    m.add_function(wrap_pyfunction!(count_numpy_import, m)?)?;
    m.add_function(wrap_pyfunction!(count_torch_import, m)?)?;
    m.add_function(wrap_pyfunction!(count_typed_numpy_import, m)?)?;
    m.add_function(wrap_pyfunction!(count_typed_numpy_import_mut, m)?)?;
    m.add_function(wrap_pyfunction!(count_rust_numpy_import, m)?)?;
    m.add_function(wrap_pyfunction!(count_rust_numpy_import_mut, m)?)?;
    m.add_function(wrap_pyfunction!(count_returned_torch, m)?)?;
    m.add_function(wrap_pyfunction!(rust_numpy_numel, m)?)?;
    m.add_function(wrap_pyfunction!(rust_numpy_numel_mut, m)?)?;
    m.add_function(wrap_pyfunction!(typed_numel_mut, m)?)?;
    m.add_function(wrap_pyfunction!(count_typed_torch_import, m)?)?;
    m.add_function(wrap_pyfunction!(count_torch_import3, m)?)?;
    m.add_function(wrap_pyfunction!(count_typed_torch_import3, m)?)?;
    m.add_function(wrap_pyfunction!(count_strided_numpy_import, m)?)?;
    m.add_function(wrap_pyfunction!(count_strided_torch_import, m)?)?;
    m.add_function(wrap_pyfunction!(typed_numel, m)?)?;
    m.add_function(wrap_pyfunction!(numel3, m)?)?;
    m.add_function(wrap_pyfunction!(typed_numel3, m)?)?;
    m.add_function(wrap_pyfunction!(report_keepalive_counts_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(drop_capsule_with_exception_set, m)?)?;
    m.add_function(wrap_pyfunction!(bombs_dropped, m)?)?;
    m.add_function(wrap_pyfunction!(checksum_detached, m)?)?;
    m.add_function(wrap_pyfunction!(export_detached, m)?)?;
    m.add_function(wrap_pyfunction!(drop_on_threads, m)?)?;
    m.add_function(wrap_pyfunction!(drop_on_detached_thread, m)?)?;
    Ok(())
}

static UNATTACHED_DROPS: AtomicUsize = AtomicUsize::new(0);
static ATTACHED_DROPS: AtomicUsize = AtomicUsize::new(0);

/// A derived class whose `Drop` records whether the dropping thread was attached to the
/// interpreter (a Python object may only be deallocated by an attached thread).
#[pyclass(frozen)]
#[derive(dlpack_rs::IntoDLPack)]
#[dlpack(pyclass)]
struct AttachProbe {
    #[dlpack(data)]
    data: Vec<u8>,
}

impl Drop for AttachProbe {
    fn drop(&mut self) {
        // SAFETY: callable from any thread; returns NULL when the thread is not attached.
        #[cfg(not(feature = "abi3"))]
        let attached = unsafe { !pyo3::ffi::compat::PyThreadState_GetUnchecked().is_null() };
        // The stable ABI has no unchecked thread-state read: count nothing as unattached.
        #[cfg(feature = "abi3")]
        let attached = true;
        if attached {
            ATTACHED_DROPS.fetch_add(1, Ordering::SeqCst);
        } else {
            UNATTACHED_DROPS.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Makes `n` `AttachProbe` objects, imports each through `__dlpack__` (so the export's
/// keepalive holds the last reference), then drops the imports on plain Rust threads that
/// never attached, while this thread waits detached. Returns (attached, unattached) drops.
#[pyfunction]
fn drop_probes_on_plain_threads(py: Python<'_>, n: usize) -> PyResult<(usize, usize)> {
    let mut imports = Vec::with_capacity(n);
    for _ in 0..n {
        let obj = Bound::new(py, AttachProbe { data: vec![1; 16] })?;
        imports.push(PyTensor::from_pyany(py, obj.as_any())?);
    }
    py.detach(move || {
        let handles: Vec<_> = imports
            .into_iter()
            .map(|t| std::thread::spawn(move || drop(t)))
            .collect();
        for h in handles {
            let _ = h.join();
        }
    });
    Ok((
        ATTACHED_DROPS.load(Ordering::SeqCst),
        UNATTACHED_DROPS.load(Ordering::SeqCst),
    ))
}

/// Imports `a` and `b` and takes views of both at once, `mode` saying which: "mut-mut" (two
/// `as_mut_slice`), "ref-mut" (`as_slice` of `a`, then `as_mut_slice` of `b`), "mut-ref".
/// Returns the sum of `b`'s elements read or written; the second view raises `BufferError`
/// when the two alias.
#[pyfunction]
fn alias_views(mut a: Imported, mut b: Imported, mode: &str) -> PyResult<f64> {
    match mode {
        "mut-mut" => {
            let mut x = a.as_mut_slice::<f32>()?;
            let mut y = b.as_mut_slice::<f32>()?;
            x[0] = 1.0;
            y[0] = 2.0;
            Ok(x[0] as f64 + y.iter().map(|&v| v as f64).sum::<f64>())
        }
        "ref-mut" => {
            let x = a.as_slice::<f32>()?;
            let mut y = b.as_mut_slice::<f32>()?;
            y[0] = 2.0;
            Ok(x[0] as f64)
        }
        "mut-ref" => {
            let mut x = a.as_mut_slice::<f32>()?;
            let y = b.as_slice::<f32>()?;
            x[0] = 1.0;
            Ok(y[0] as f64)
        }
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "unknown mode {other}"
        ))),
    }
}

pub fn register_probes(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AttachProbe>()?;
    m.add_function(wrap_pyfunction!(drop_probes_on_plain_threads, m)?)?;
    m.add_function(wrap_pyfunction!(alias_views, m)?)?;
    Ok(())
}

/// Imports `obj`, holds a shared `uint8` view of it and calls `callback()` meanwhile (so that
/// another module, or this one, tries to write the same memory); returns what it returned.
#[pyfunction]
fn read_while(obj: Imported, callback: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let view = obj.as_slice::<u8>()?;
    let result = callback.call0()?.unbind();
    let _ = view[0];
    Ok(result)
}

/// Imports `obj` (a `dlpack_rs.Tensor` of float64), holds a mutable view of it, and asks `obj`
/// for a copy meanwhile (`__dlpack__(copy=True, max_version=(1, 3))`): the copy would race
/// with the writer, so it must raise.
#[pyfunction]
fn copy_while_writing(
    py: Python<'_>,
    mut obj: Imported,
    source: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let mut view = obj.as_mut_slice::<f64>()?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("copy", true)?;
    kwargs.set_item("max_version", (1, 3))?;
    let result = source
        .call_method("__dlpack__", (), Some(&kwargs))
        .map(drop);
    view[0] += 1.0;
    result
}

pub fn register_views(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_while, m)?)?;
    m.add_function(wrap_pyfunction!(copy_while_writing, m)?)?;
    Ok(())
}

/// `out = a + b` elementwise through typed arguments (1-D float32).
#[pyfunction]
fn typed_add(
    a: dlpack_rs::pyo3_glue::TensorView<'_, f32, Dims<1>, CContig>,
    b: dlpack_rs::pyo3_glue::TensorView<'_, f32, Dims<1>, CContig>,
    mut out: dlpack_rs::pyo3_glue::TensorViewMut<'_, f32, Dims<1>, CContig>,
) -> PyResult<()> {
    if a.len() != b.len() || a.len() != out.len() {
        return Err(pyo3::exceptions::PyValueError::new_err("lengths differ"));
    }
    for ((o, x), y) in out.iter_mut().zip(a.iter()).zip(b.iter()) {
        *o = x + y;
    }
    Ok(())
}

/// Sum of a float64 tensor of any number of dimensions, through a typed argument.
#[pyfunction]
fn typed_sum(x: dlpack_rs::pyo3_glue::TensorView<'_, f64, Dims<ANY>, CContig>) -> f64 {
    x.iter().sum()
}

pub fn register_typed(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(typed_add, m)?)?;
    m.add_function(wrap_pyfunction!(typed_sum, m)?)?;
    Ok(())
}

/// How the library's keepalives let go of their objects so far (see
/// `dlpack_rs::pyo3_glue::KeepaliveCounts`), as a dict.
#[pyfunction]
fn keepalive_counts(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    let c = dlpack_rs::pyo3_glue::keepalive_counts();
    let d = pyo3::types::PyDict::new(py);
    d.set_item("attached", c.attached)?;
    d.set_item("after_attaching", c.after_attaching)?;
    d.set_item("leaked_at_shutdown", c.leaked_at_shutdown)?;
    d.set_item("leaked_other_interpreter", c.leaked_other_interpreter)?;
    d.set_item("deleter_deferred", c.deleter_deferred)?;
    Ok(d)
}

extern "C" fn print_keepalive_counts() {
    let c = dlpack_rs::pyo3_glue::keepalive_counts();
    eprintln!(
        "keepalive counts at exit: attached={} after_attaching={} leaked_at_shutdown={} leaked_other_interpreter={}",
        c.attached, c.after_attaching, c.leaked_at_shutdown, c.leaked_other_interpreter
    );
}

extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

/// Prints the keepalive counts on stderr when the process exits, after the interpreter has
/// finalized (a C `atexit` handler), so that shutdown tests can read which paths ran.
#[pyfunction]
fn report_keepalive_counts_at_exit() -> PyResult<()> {
    // SAFETY: registers a plain function that touches no Python state.
    if unsafe { atexit(print_keepalive_counts) } != 0 {
        return Err(PyRuntimeError::new_err("atexit registration failed"));
    }
    Ok(())
}

/// Makes a capsule of ours nobody consumes (a plain export, or one whose keepalive panics),
/// sets a pending `ValueError("pending from Rust")`, and drops the capsule (its last
/// reference) while that exception is set, so that its destructor runs with it pending. Returns
/// the exception pending afterwards, as `(type name, message)`, or None if there was none.
#[pyfunction]
fn drop_capsule_with_exception_set(
    py: Python<'_>,
    panicking: bool,
    versioned: bool,
) -> PyResult<Option<(String, String)>> {
    let capsule = if panicking {
        panicking_capsule(py, versioned)?
    } else {
        let t = DLPackTensor::from_export(safe::Export::new(vec![1u8, 2, 3, 4]))?;
        if versioned {
            t.into_capsule_versioned(py)?
        } else {
            t.into_capsule(py)?
        }
    };
    // SAFETY: `capsule` is a live object and this thread is attached.
    let refs = unsafe { pyo3::ffi::Py_REFCNT(capsule.as_ptr()) };
    assert_eq!(refs, 1, "the capsule must die here");
    pyo3::exceptions::PyValueError::new_err("pending from Rust").restore(py);
    drop(capsule);
    Ok(PyErr::take(py).map(|e| {
        let name = e
            .get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        (name, e.value(py).to_string())
    }))
}

/// A counted Rust tensor of `data` (float32, one dimension) returned as a tensor of the
/// framework of type `ty` (`Returned<Framework>`: its exchange table, its `from_dlpack`, or a
/// `dlpack_rs.Tensor`). Returns the framework's tensor and the address of the Rust data.
#[pyfunction]
#[pyo3(signature = (ty, data, read_only=false))]
fn hand_to<'py>(
    ty: &Bound<'py, pyo3::types::PyType>,
    data: &[u8],
    read_only: bool,
) -> PyResult<(Bound<'py, PyAny>, usize)> {
    use dlpack_rs::pyo3_glue::{Framework, Returned};
    let py = ty.py();
    let len = (data.len() / 4) as i64;
    let t = crate::new_rust_tensor(data, "float32", vec![len], None, 0, read_only, (1, 0))?;
    let tensor = dlpack_rs::IntoDLPack::into_managed_tensor_versioned(t)?;
    let ptr = tensor.data_ptr() as usize;
    let returned = Returned::like(py, &Framework::of_type(ty), tensor);
    Ok((returned.into_pyobject(py)?, ptr))
}

/// Imports `t` and returns its element count: the lightest import, for instruction counts.
#[pyfunction]
fn numel(t: PyTensor) -> usize {
    t.numel()
}

/// Turns callgrind's instrumentation on: its client request `START_INSTRUMENTATION`, as valgrind's
/// `callgrind.h` defines it, for a process started with `--instr-atstart=no` (which then runs
/// the interpreter's and torch's start-up at about the speed of valgrind without a tool). Outside
/// valgrind, and on other architectures, it does nothing.
#[pyfunction]
fn start_instrumentation() {
    #[cfg(target_arch = "x86_64")]
    {
        // `VG_USERREQ_TOOL_BASE('C', 'T') + 4`.
        const START_INSTRUMENTATION: u64 = (((b'C' as u64) << 24) | ((b'T' as u64) << 16)) + 4;
        let request: [u64; 6] = [START_INSTRUMENTATION, 0, 0, 0, 0, 0];
        let mut answer: u64 = 0;
        // SAFETY: valgrind's client-request sequence for amd64: four rotations of rdi, by 128
        // bits in all (rdi ends as it began), and `xchg rbx, rbx` (rbx unchanged). Natively it
        // changes nothing but the flags; under valgrind, valgrind reads the six words at rax
        // (alive for the statement) and writes its answer in rdx.
        unsafe {
            core::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                in("rax") request.as_ptr(),
                inout("rdx") answer,
                options(nostack, readonly),
            );
        }
        std::hint::black_box(answer);
    }
}

/// A new 1-element Rust tensor returned to torch through its exchange table (`Returned<Torch>`),
/// for instruction counts.
#[pyfunction]
fn returned_torch() -> PyResult<dlpack_rs::pyo3_glue::Returned<dlpack_rs::pyo3_glue::Torch>> {
    let t = dlpack_rs::safe::Export::new(vec![1.0f32]).versioned()?;
    Ok(dlpack_rs::pyo3_glue::Returned::new(t))
}

/// Calls `f(*args)` `n` times. Never inlined, and one copy per measured case (the
/// `count_*` below), so that callgrind's inclusive cost of each is that case's `n` calls.
#[inline(never)]
fn call_n(f: &Bound<'_, PyAny>, args: &Bound<'_, PyTuple>, n: usize) -> PyResult<()> {
    for _ in 0..n {
        std::hint::black_box(f.call1(args)?);
    }
    Ok(())
}

macro_rules! counted_loops {
    ($($name:ident),*) => {$(
        /// `f(*args)`, `n` times: the loop `tests/perf/instructions.py` counts.
        #[pyfunction]
        #[inline(never)]
        fn $name(f: &Bound<'_, PyAny>, args: &Bound<'_, PyTuple>, n: usize) -> PyResult<()> {
            call_n(f, args, n)
        }
    )*};
}
counted_loops!(
    count_export,
    count_numpy_import,
    count_torch_import,
    count_typed_numpy_import,
    count_typed_numpy_import_mut,
    count_typed_torch_import,
    count_torch_import3,
    count_typed_torch_import3,
    count_strided_numpy_import,
    count_strided_torch_import,
    count_rust_numpy_import,
    count_rust_numpy_import_mut,
    count_returned_torch
);

/// rust-numpy's read-only view of a float32 array of any rank: the reference the instruction
/// counts compare `typed_numel` with.
#[pyfunction]
fn rust_numpy_numel(a: numpy::PyReadonlyArrayDyn<'_, f32>) -> usize {
    numpy::PyUntypedArrayMethods::len(&*a)
}

/// rust-numpy's writable view: the reference of `typed_numel_mut`.
#[pyfunction]
fn rust_numpy_numel_mut(a: numpy::PyReadwriteArrayDyn<'_, f32>) -> usize {
    numpy::PyUntypedArrayMethods::len(&**a)
}

/// The number of elements of a float32 tensor argument of any shape (typed).
#[pyfunction]
fn typed_numel(t: dlpack_rs::pyo3_glue::TensorView<'_, f32, Dims<ANY>, CContig>) -> usize {
    t.len()
}

/// The number of elements of a writable float32 tensor argument of any shape (typed).
#[pyfunction]
fn typed_numel_mut(t: dlpack_rs::pyo3_glue::TensorViewMut<'_, f32, Dims<ANY>, CContig>) -> usize {
    t.len()
}

/// The elements of three tensor arguments.
#[pyfunction]
fn numel3(a: PyTensor, b: PyTensor, c: PyTensor) -> usize {
    a.numel() + b.numel() + c.numel()
}

/// The elements of three float32 tensor arguments (typed).
#[pyfunction]
fn typed_numel3(
    a: dlpack_rs::pyo3_glue::TensorView<'_, f32, Dims<ANY>, CContig>,
    b: dlpack_rs::pyo3_glue::TensorView<'_, f32, Dims<ANY>, CContig>,
    c: dlpack_rs::pyo3_glue::TensorView<'_, f32, Dims<ANY>, CContig>,
) -> usize {
    a.len() + b.len() + c.len()
}

/// Imports `obj` (optionally asking the producer for `stream`) and describes where it landed:
/// `(device_type, device_id)`, the producer's stream when the import came through an exchange
/// table unsynchronised (`PyTensor::producer_stream`, as an int), and whether a host view is
/// refused (device memory must never be read from the CPU).
#[pyfunction]
#[pyo3(signature = (obj, stream=None, unsynchronized=false))]
fn import_device(
    obj: &Bound<'_, PyAny>,
    stream: Option<i64>,
    unsynchronized: bool,
) -> PyResult<((i32, i32), Option<usize>, bool)> {
    let mut options = dlpack_rs::pyo3_glue::ImportOptions::new().unsynchronized(unsynchronized);
    if let Some(s) = stream {
        options = options.stream(s);
    }
    let t = options.import(obj)?;
    let device = t.device();
    Ok((
        (device.device_type.0, device.device_id),
        t.producer_stream().map(|s| s as usize),
        // Every host access is refused (a copy reads the data on the host, whatever the dtype).
        t.copy().is_err(),
    ))
}

/// A `dlpack_rs.Tensor` of `n` bytes that claims to live on `device` (the memory is host
/// memory: for tests of arguments and refusals only, never to be read there).
#[pyfunction]
fn make_device_tensor(n: usize, device: (i32, i32)) -> PyResult<DLPackTensor> {
    let t = crate::new_rust_tensor(&vec![0; n], "uint8", vec![n as i64], None, 0, false, device)?;
    Ok(DLPackTensor::new(
        dlpack_rs::IntoDLPack::into_managed_tensor_versioned(t)?,
    ))
}
