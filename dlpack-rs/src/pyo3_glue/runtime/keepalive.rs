//! When a deleter may touch Python: the attached-thread probe, shutdown, [`PyKeepalive`].

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;

use crate::pyo3_glue::runtime::cpython;
use pyo3::types::PyCFunction;

/// Set by an `atexit` hook once the interpreter starts shutting down.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// 0: hook not installed; 1: being installed by some thread; 2: installed (or given up).
static HOOK_STATE: AtomicU8 = AtomicU8::new(0);

/// Registers the `atexit` hook that sets the shutdown flag, once per copy of this crate.
pub(crate) fn install_shutdown_hook(py: Python<'_>) {
    if HOOK_STATE.load(Ordering::Acquire) != 0 {
        return;
    }
    if HOOK_STATE
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    install_dropper();
    // Once, like the hook (until then the probe uses the check right on every version).
    let kind = if py.version_info() >= (3, 12) { 2 } else { 1 };
    TSTATE_PER_THREAD.store(kind, Ordering::Relaxed);
    let hook = PyCFunction::new_closure(py, None, None, |_args, _kwargs| {
        SHUTTING_DOWN.store(true, Ordering::SeqCst);
    });
    let registered = hook.and_then(|hook| {
        py.import("atexit")?
            .call_method1("register", (hook,))
            .map(drop)
    });
    if registered.is_err() {
        // Without the hook we cannot tell shutdown apart: be conservative.
        SHUTTING_DOWN.store(true, Ordering::SeqCst);
    }
    HOOK_STATE.store(2, Ordering::Release);
}

/// The current-thread-state read: 0 not known yet; 1 the GIL holder's (<= 3.11); 2 this thread's.
static TSTATE_PER_THREAD: AtomicU8 = AtomicU8::new(0);

/// Whether this thread is attached, by CPython's own thread state; always "no" under `abi3`.
pub(crate) fn this_thread_is_attached() -> bool {
    #[cfg(not(feature = "abi3"))]
    {
        let (current, own) = cpython::thread_states();
        if current.is_null() {
            return false;
        }
        match TSTATE_PER_THREAD.load(Ordering::Relaxed) {
            2 => true,
            // <= 3.11, or not known yet (the check is right on every version then).
            _ => current == own,
        }
    }
    #[cfg(feature = "abi3")]
    {
        false
    }
}

/// Makes export deleters drop their keepalives as [`drop_at`] says (idempotent, no Python code).
pub(crate) fn install_dropper() {
    crate::safe::set_keepalive_dropper(&DROPPER);
}

/// How export deleters drop a keepalive that may run user code ([`install_dropper`]).
static DROPPER: crate::safe::KeepaliveDropper = crate::safe::KeepaliveDropper {
    decide: drop_at,
    elsewhere: drop_elsewhere,
};

/// Where a deleter on this thread drops a keepalive that may run user code: in place where the
/// thread is attached (by CPython's own thread state) or was never a Python thread (pyo3 counts
/// it unattached: a `Python::attach` in the `Drop` attaches for real). On a Python thread whose
/// GIL is released pyo3 may still count it attached (foreign code such as torch's tensor
/// dealloc released the GIL under a pyo3 frame): [`drop_elsewhere`]. Leaked once shutdown began
/// there, and on any thread while the interpreter finalizes.
fn drop_at() -> crate::safe::DropAt {
    use crate::safe::DropAt;
    if this_thread_is_attached() {
        return DropAt::Here;
    }
    // Finalizing (or finalized): no thread state can be asked, and none may attach.
    let finalizing = !cpython::is_initialized();
    if !finalizing && !cpython::has_thread_state() {
        return DropAt::Here;
    }
    if finalizing || SHUTTING_DOWN.load(Ordering::SeqCst) {
        count(&LEAKED_AT_SHUTDOWN);
        return DropAt::Never;
    }
    DropAt::Elsewhere
}

/// Drops handed over by [`drop_elsewhere`], taken by [`run_pending`] or the fallback thread.
#[cfg(not(feature = "abi3"))]
static QUEUED: std::sync::Mutex<Vec<Box<dyn FnOnce() + Send>>> = std::sync::Mutex::new(Vec::new());

/// Whether a pending call to [`run_pending`] is scheduled.
#[cfg(not(feature = "abi3"))]
static SCHEDULED: AtomicBool = AtomicBool::new(false);

/// Wakes the fallback thread when a drop is queued.
#[cfg(not(feature = "abi3"))]
static QUEUED_SOME: std::sync::Condvar = std::sync::Condvar::new();

/// Whether the fallback thread was started.
#[cfg(not(feature = "abi3"))]
static FALLBACK: std::sync::Once = std::sync::Once::new();

/// The queue, locked. Only pushes and takes run under the lock (drops run after it), so a
/// poisoned lock still guards a whole `Vec`.
#[cfg(not(feature = "abi3"))]
fn queue() -> std::sync::MutexGuard<'static, Vec<Box<dyn FnOnce() + Send>>> {
    QUEUED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The queued drops, taken under the lock (each runs once, by whoever takes it).
#[cfg(not(feature = "abi3"))]
fn take_queued() -> Vec<Box<dyn FnOnce() + Send>> {
    core::mem::take(&mut *queue())
}

/// Queues `drop` without waiting for anything (neither the GIL nor another thread). A pending
/// call runs it on the main thread holding the GIL, at its next check; whatever is still queued
/// 100 ms later runs on a fallback thread that never is a Python thread (pyo3 counts it
/// unattached: a `Python::attach` attaches for real, a dropped `Py` goes to pyo3's pool), so a
/// blocked main thread or a full pending-call queue delays a drop, never strands it. Under
/// `abi3`, which hides whether this thread holds the GIL, it attaches for real instead.
fn drop_elsewhere(drop: Box<dyn FnOnce() + Send>) {
    count(&DELETER_DEFERRED);
    #[cfg(not(feature = "abi3"))]
    {
        queue().push(drop);
        if !SCHEDULED.swap(true, Ordering::AcqRel) && !cpython::add_pending_call(run_pending) {
            SCHEDULED.store(false, Ordering::Release);
        }
        FALLBACK.call_once(|| {
            // Without it, drops wait for the pending call alone.
            let _ = std::thread::Builder::new()
                .name("dlpack-rs keepalive drops".into())
                .spawn(run_fallback);
        });
        QUEUED_SOME.notify_one();
    }
    #[cfg(feature = "abi3")]
    // SAFETY: initialized and not shutting down (`drop_at` checked); `drop` keeps nothing of
    // Python past the call.
    unsafe {
        cpython::with_attached(drop)
    }
}

/// The pending call: runs the queued drops (CPython calls it holding the GIL; never unwinds:
/// each drop catches its panics).
#[cfg(not(feature = "abi3"))]
extern "C" fn run_pending(_: *mut core::ffi::c_void) -> core::ffi::c_int {
    SCHEDULED.store(false, Ordering::Release);
    take_queued().into_iter().for_each(|drop| drop());
    0
}

/// The fallback thread: once woken, waits 100 ms, then runs what the pending call left.
#[cfg(not(feature = "abi3"))]
fn run_fallback() {
    loop {
        drop(
            QUEUED_SOME
                .wait_while(queue(), |queued| queued.is_empty())
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        take_queued().into_iter().for_each(|drop| drop());
    }
}

/// Whether shutdown began and this thread is not attached, so owners leak instead.
pub(crate) fn exiting_unattached() -> bool {
    SHUTTING_DOWN.load(Ordering::SeqCst) && !this_thread_is_attached()
}

/// How the keepalives dropped so far let go of their object (feature `test-counters`).
#[cfg(feature = "test-counters")]
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeepaliveCounts {
    /// Released at once: the dropping thread was attached.
    pub attached: usize,
    /// Released after attaching the dropping thread.
    pub after_attaching: usize,
    /// Leaked: shutdown had begun and the thread was not attached (a `PyKeepalive`, or any
    /// keepalive an export's deleter left undropped).
    pub leaked_at_shutdown: usize,
    /// Leaked: the object belongs to another (sub-)interpreter than the dropping thread's.
    pub leaked_other_interpreter: usize,
    /// Export keepalives a deleter handed to the drop thread (on a Python thread whose GIL was
    /// released; under abi3, attached for real there instead).
    pub deleter_deferred: usize,
}

static RELEASED_ATTACHED: AtomicUsize = AtomicUsize::new(0);
static RELEASED_AFTER_ATTACHING: AtomicUsize = AtomicUsize::new(0);
static LEAKED_AT_SHUTDOWN: AtomicUsize = AtomicUsize::new(0);
static LEAKED_OTHER_INTERPRETER: AtomicUsize = AtomicUsize::new(0);
static DELETER_DEFERRED: AtomicUsize = AtomicUsize::new(0);

/// Counts one drop on its path (feature `test-counters`; nothing otherwise).
#[inline]
fn count(counter: &AtomicUsize) {
    #[cfg(feature = "test-counters")]
    counter.fetch_add(1, Ordering::Relaxed);
    #[cfg(not(feature = "test-counters"))]
    let _ = counter;
}

/// The counts so far (see [`KeepaliveCounts`]).
#[cfg(feature = "test-counters")]
#[doc(hidden)]
pub fn keepalive_counts() -> KeepaliveCounts {
    KeepaliveCounts {
        attached: RELEASED_ATTACHED.load(Ordering::Relaxed),
        after_attaching: RELEASED_AFTER_ATTACHING.load(Ordering::Relaxed),
        leaked_at_shutdown: LEAKED_AT_SHUTDOWN.load(Ordering::Relaxed),
        leaked_other_interpreter: LEAKED_OTHER_INTERPRETER.load(Ordering::Relaxed),
        deleter_deferred: DELETER_DEFERRED.load(Ordering::Relaxed),
    }
}

/// A Python object held as the keepalive of an exported tensor, dropped soundly on any thread.
#[derive(Debug)]
pub struct PyKeepalive {
    obj: Option<Py<PyAny>>,
    /// The interpreter the object belongs to (its ID: unlike its address, never reused).
    interp: i64,
}

impl PyKeepalive {
    /// Holds `obj` until this value is dropped.
    #[inline]
    pub fn new(py: Python<'_>, obj: Py<PyAny>) -> Self {
        install_shutdown_hook(py);
        PyKeepalive {
            obj: Some(obj),
            // SAFETY: `py`: pyo3 counts this thread attached, and is wrong only inside foreign
            // code that released the GIL, where this crate's deleters drop keepalives elsewhere
            // and make none (SAFETY.md, "When deleters run").
            interp: unsafe { cpython::interpreter_id() },
        }
    }

    /// The object held.
    pub fn object(&self) -> Option<&Py<PyAny>> {
        self.obj.as_ref()
    }
}

impl Drop for PyKeepalive {
    fn drop(&mut self) {
        let Some(obj) = self.obj.take() else { return };
        // SAFETY: a strong reference we own, of an object of interpreter `self.interp`.
        unsafe { release_owned(obj.into_ptr(), self.interp) };
    }
}

/// Releases a strong reference from any thread, as [`PyKeepalive`]'s `Drop` does (attaching if
/// needed); leaked during shutdown or for another interpreter's object.
/// # Safety
/// `ptr` is a strong reference the caller owns (and gives up), to an object of the interpreter
/// whose ID is `interp`.
pub(crate) unsafe fn release_owned(ptr: *mut ffi::PyObject, interp: i64) {
    if this_thread_is_attached() {
        // SAFETY: attached, by CPython's own thread state (just asked).
        if unsafe { cpython::interpreter_id() } != interp {
            // Attached to another (sub-)interpreter, whose lock this thread cannot take: leak.
            count(&LEAKED_OTHER_INTERPRETER);
            return;
        }
        // SAFETY: attached (by CPython's own thread state) to the object's interpreter, and a
        // strong reference we own: released directly (even during finalization, as CPython does).
        unsafe { cpython::decref(ptr) };
        count(&RELEASED_ATTACHED);
        return;
    }
    if SHUTTING_DOWN.load(Ordering::SeqCst) || !cpython::is_initialized() {
        // Attaching now could hang or end this thread in a finalizing interpreter: leak.
        count(&LEAKED_AT_SHUTDOWN);
        return;
    }
    // Under `abi3` an attached thread takes this path too: `PyGILState_Ensure` is re-entrant.
    // SAFETY: initialized and not shutting down (checked above; pyo3's wrapper makes a thread
    // meeting a finalizing interpreter hang instead of unwinding through Rust frames).
    unsafe {
        cpython::with_attached(|| {
            // SAFETY: attached (`with_attached`).
            if cpython::interpreter_id() == interp {
                // SAFETY: attached (`with_attached`) to `ptr`'s interpreter; the reference is ours.
                cpython::decref(ptr);
                count(&RELEASED_AFTER_ATTACHING);
            } else {
                // `PyGILState_Ensure` attaches to the main interpreter: another's object leaks.
                count(&LEAKED_OTHER_INTERPRETER);
            }
        })
    }
}
