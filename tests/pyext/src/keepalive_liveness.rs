//! What `tests/python/test_keepalive_liveness.py` needs (the keepalive dropper's liveness):
//! derived keepalives whose `Drop` has an effect Rust code waits for (a buffer pool),
//! a live count of derived keepalives, and a full pending-call queue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use dlpack_rs::IntoDLPack;
use pyo3::prelude::*;

/// A bounded pool of buffers: `take` waits until one is returned.
struct PoolInner {
    free: Mutex<Vec<Vec<f32>>>,
    returned: Condvar,
}

/// A derived export (no `#[pyclass]`: the struct is the keepalive) of a pooled buffer, which its
/// `Drop` gives back to the pool.
#[derive(dlpack_rs::IntoDLPack)]
struct Pooled {
    #[dlpack(data)]
    data: Vec<f32>,
    pool: Arc<PoolInner>,
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let data = std::mem::take(&mut self.data);
        self.pool.free.lock().unwrap().push(data);
        self.pool.returned.notify_all();
    }
}

/// A pool of `capacity` buffers of 4 floats.
#[pyclass(frozen)]
struct BufferPool {
    inner: Arc<PoolInner>,
}

#[pymethods]
impl BufferPool {
    #[new]
    fn new(capacity: usize) -> Self {
        BufferPool {
            inner: Arc::new(PoolInner {
                free: Mutex::new((0..capacity).map(|_| vec![0.0; 4]).collect()),
                returned: Condvar::new(),
            }),
        }
    }

    /// With the GIL released (`py.detach`), `n` times: takes a buffer (waiting at most
    /// `timeout_s` for one to come back), exports it, and drops the export (no consumer: the
    /// deleter runs here at once). Returns how many rounds completed.
    fn cycle_detached(&self, py: Python<'_>, n: usize, timeout_s: f64) -> PyResult<usize> {
        let inner = self.inner.clone();
        py.detach(move || {
            for i in 0..n {
                let deadline = Instant::now() + Duration::from_secs_f64(timeout_s);
                let mut free = inner.free.lock().unwrap();
                let data = loop {
                    if let Some(data) = free.pop() {
                        break data;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(i);
                    }
                    free = inner.returned.wait_timeout(free, left).unwrap().0;
                };
                drop(free);
                let export = Pooled {
                    data,
                    pool: inner.clone(),
                }
                .into_managed_tensor_versioned()?;
                drop(export);
            }
            Ok(n)
        })
    }

    /// Takes a buffer (waiting with the GIL released, at most `timeout_s`; `TimeoutError`
    /// after) and returns a versioned capsule of its export.
    fn take_capsule<'py>(
        &self,
        py: Python<'py>,
        timeout_s: f64,
    ) -> PyResult<Bound<'py, pyo3::types::PyCapsule>> {
        let inner = self.inner.clone();
        let data = py.detach(|| {
            let deadline = Instant::now() + Duration::from_secs_f64(timeout_s);
            let mut free = inner.free.lock().unwrap();
            loop {
                if let Some(data) = free.pop() {
                    return Some(data);
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return None;
                }
                free = inner.returned.wait_timeout(free, left).unwrap().0;
            }
        });
        let Some(data) = data else {
            return Err(pyo3::exceptions::PyTimeoutError::new_err(
                "no buffer came back to the pool",
            ));
        };
        Pooled { data, pool: inner }.into_capsule_versioned(py)
    }

    /// Buffers in the pool now.
    fn free(&self) -> usize {
        self.inner.free.lock().unwrap().len()
    }
}

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Counts the live [`Counted`] values.
struct LiveGuard;

impl LiveGuard {
    fn new() -> Self {
        LIVE.fetch_add(1, Ordering::SeqCst);
        LiveGuard
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A derived export whose keepalive (itself) is counted while it lives.
#[derive(dlpack_rs::IntoDLPack)]
struct Counted {
    #[dlpack(data)]
    data: Vec<f32>,
    _live: LiveGuard,
}

fn counted_export(len: usize) -> PyResult<dlpack_rs::safe::ManagedTensorVersioned> {
    Ok(Counted {
        data: vec![0.0; len],
        _live: LiveGuard::new(),
    }
    .into_managed_tensor_versioned()?)
}

/// Live [`Counted`] values (keepalives not dropped yet).
#[pyfunction]
fn live_counted() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// With the GIL released, makes and drops `n` exports of `len` floats each, one at a time (a
/// worker loop freeing what it exported); returns how many were still alive at the loop's end.
#[pyfunction]
fn churn_detached(py: Python<'_>, n: usize, len: usize) -> PyResult<usize> {
    let before = LIVE.load(Ordering::SeqCst);
    py.detach(move || {
        for _ in 0..n {
            drop(counted_export(len)?);
        }
        Ok(LIVE.load(Ordering::SeqCst) - before)
    })
}

extern "C" fn noop_pending(_: *mut core::ffi::c_void) -> core::ffi::c_int {
    0
}

/// Attached: fills the interpreter's pending-call queue with no-op calls (as another extension,
/// or a burst of them, may), then, with the GIL released, drops one [`Counted`] export (its
/// deleter defers the keepalive). Returns how many no-op calls were queued.
#[pyfunction]
fn fill_pending_then_drop_detached(py: Python<'_>) -> PyResult<usize> {
    let mut queued = 0;
    // SAFETY: attached; a no-op callback taking no argument.
    while queued < 100_000
        && unsafe { pyo3::ffi::Py_AddPendingCall(Some(noop_pending), core::ptr::null_mut()) } == 0
    {
        queued += 1;
    }
    let export = counted_export(4)?;
    py.detach(move || drop(export));
    Ok(queued)
}

/// With the GIL released, drops one [`Counted`] export.
#[pyfunction]
fn drop_counted_detached(py: Python<'_>) -> PyResult<()> {
    let export = counted_export(4)?;
    py.detach(move || drop(export));
    Ok(())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BufferPool>()?;
    m.add_function(wrap_pyfunction!(live_counted, m)?)?;
    m.add_function(wrap_pyfunction!(churn_detached, m)?)?;
    m.add_function(wrap_pyfunction!(fill_pending_then_drop_detached, m)?)?;
    m.add_function(wrap_pyfunction!(drop_counted_detached, m)?)?;
    Ok(())
}

/// A lock Rust code may hold across a Python callback.
static RUST_LOCK: Mutex<()> = Mutex::new(());
static LOCK_DROP_TIMEOUTS: AtomicUsize = AtomicUsize::new(0);

/// A derived export whose `Drop` takes [`RUST_LOCK`] (giving up after 2 s, counted).
#[derive(dlpack_rs::IntoDLPack)]
struct LocksOnDrop {
    #[dlpack(data)]
    data: Vec<f32>,
}

impl Drop for LocksOnDrop {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            if RUST_LOCK.try_lock().is_ok() {
                return;
            }
            if Instant::now() >= deadline {
                LOCK_DROP_TIMEOUTS.fetch_add(1, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Holds [`RUST_LOCK`] while calling `callback` (attached).
#[pyfunction]
fn with_rust_lock(callback: &Bound<'_, PyAny>) -> PyResult<()> {
    let _guard = RUST_LOCK.lock().unwrap();
    callback.call0()?;
    Ok(())
}

/// With the GIL released, drops one [`LocksOnDrop`] export.
#[pyfunction]
fn drop_locking_detached(py: Python<'_>) -> PyResult<()> {
    let export = LocksOnDrop { data: vec![0.0; 4] }.into_managed_tensor_versioned()?;
    py.detach(move || drop(export));
    Ok(())
}

/// How many [`LocksOnDrop`] drops gave up waiting for the lock.
#[pyfunction]
fn lock_drop_timeouts() -> usize {
    LOCK_DROP_TIMEOUTS.load(Ordering::SeqCst)
}

pub fn register_locking(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(with_rust_lock, m)?)?;
    m.add_function(wrap_pyfunction!(drop_locking_detached, m)?)?;
    m.add_function(wrap_pyfunction!(lock_drop_timeouts, m)?)?;
    Ok(())
}

/// A field whose `Drop` writes a line to stderr (no Python: safe anywhere, finalization too).
struct ExitProbe;

impl Drop for ExitProbe {
    fn drop(&mut self) {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), b"exit-probe dropped\n");
    }
}

/// A derived export with an [`ExitProbe`] (no `#[pyclass]`: the struct is the keepalive).
#[derive(dlpack_rs::IntoDLPack)]
struct WithExitProbe {
    #[dlpack(data)]
    data: Vec<f32>,
    _probe: ExitProbe,
}

/// Holds one export of a [`WithExitProbe`] until the holder is dropped (its deleter then runs on
/// the dropping thread).
#[pyclass(frozen)]
struct ProbeHolder {
    _export: Mutex<Option<dlpack_rs::safe::ManagedTensorVersioned>>,
}

#[pymethods]
impl ProbeHolder {
    #[new]
    fn new() -> PyResult<Self> {
        let export = WithExitProbe {
            data: vec![0.0; 4],
            _probe: ExitProbe,
        }
        .into_managed_tensor_versioned()?;
        Ok(ProbeHolder {
            _export: Mutex::new(Some(export)),
        })
    }
}

pub fn register_exit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ProbeHolder>()?;
    Ok(())
}
