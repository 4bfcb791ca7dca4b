"""Reproducers from the review of the export deleters' keepalive dropper (commits "Soundness:
an export's keepalive dropped by its deleter on a Python thread whose GIL foreign code
released ..." and "Export's deleter drops its buffer in place ...").

Each test says what it shows. Crashes and hangs run in a subprocess.
"""

import subprocess
import sys

from conftest import needs_torch

# Shows a liveness regression of the dropper (not a soundness hole): an export's keepalive that
# is not a `PyKeepalive` (here a derived plain-Rust struct, no Python in its `Drop`) dropped on a
# Python thread inside pyo3's `py.detach` now makes the deleter take the GIL
# (`PyGILState_Ensure`) before dropping it, although pyo3 counts that thread unattached (a
# `Python::attach` in the `Drop` would attach for real on its own). A thread that holds the GIL
# while it waits for a lock the dropping thread holds (here `len(cache)`, locking a `Mutex`
# while attached, as the test extension's own `Held` does) now deadlocks with it; before the
# dropper the drop needed no GIL and both finished. Fails now (timeout), passed before 25282a0.
_DEADLOCK = """
import threading, time
import dlpack_testext as ext

# Any export through Python joins the registry, which installs the dropper.
ext.export_detached(1).__dlpack__(max_version=(1, 3))
cache = ext.ExportCache()
cache.fill(4)
t = threading.Thread(target=cache.clear_detached, args=(0.5,))
t.start()
while not cache.is_locked():
    time.sleep(0.001)
# Attached, waiting for the lock that `clear_detached` holds while its deleters run.
print('len', len(cache), flush=True)
t.join()
print('ok', flush=True)
"""


def test_detached_drop_of_a_plain_keepalive_does_not_deadlock_with_a_gil_holder():
    try:
        r = subprocess.run(
            [sys.executable, "-c", _DEADLOCK], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            "deadlock: the export deleter, on a Python thread inside py.detach holding a lock, "
            "waits for the GIL, which a thread waiting for that lock holds "
            f"(stdout so far: {e.stdout!r})"
        ) from None
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["len", "0", "ok"], r.stdout


# Shows that SAFETY.md ("When deleters run": "Every other keepalive (a derived struct exported
# without `#[pyclass]`, a `Buffer`) ... attaches for real before dropping its keepalive") and the
# first sentence of the CHANGELOG entry are false since f2d627d: an `Export`'s deleter drops its
# `Buffer` in place, so a `Buffer` whose drop asks pyo3 to attach (a `Py` field's drop would)
# runs without the GIL when torch's tensor dealloc frees it under a pyo3 frame (torch releases
# the GIL there). Not a hole in safe code: the `Buffer` impl is `unsafe` and breaks the new last
# line of the trait's contract on purpose; the test pins that the line is load-bearing and the
# documents disagree with the code. Fails now (2: pyo3 ran the closure with the GIL released);
# passed at 25282a0.
_BUFFER_CHAIN = """
import gc, torch, dlpack_testext as ext
t = ext.probe_buffer_to_torch()
h = ext.hold(t)
del t
del h
gc.collect()
print('ok', ext.probe_buffer_seen())
"""


@needs_torch
def test_a_buffer_keepalive_freed_by_torch_is_dropped_attached_as_safety_md_says():
    r = subprocess.run(
        [sys.executable, "-c", _BUFFER_CHAIN], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ok, seen = r.stdout.split()
    assert ok == "ok"
    # 1: the drop ran and pyo3's attach held the GIL; 2: pyo3 let it run without the GIL.
    assert int(seen) == 1


# Shows an abi3-only regression (a leak, not a soundness hole): under abi3 the thread-state
# read is hidden, so `this_thread_is_attached()` always answers "no", and once this crate's
# atexit hook ran the dropper leaks every keepalive it does not drop in place, even on the main
# thread holding the GIL. Here an atexit callback registered before the hook (so run after it)
# drops a capsule whose keepalive panics when dropped (caught, counted): the non-abi3 build
# drops it (the count goes up), an abi3 build leaks it (its `Drop` never runs), where before
# 25282a0 it was dropped. (Later, inside `Py_FinalizeEx`, `Py_IsInitialized()` is 0 and both
# builds drop in place: see the next test.) Passes on the non-abi3 build; fails under abi3
# (checked here with `maturin develop --features abi3`).
_ATEXIT_DROP = """
import atexit
def late():
    import dlpack_testext as ext
    before = ext.bombs_dropped()
    c = ext.panicking_capsule(True)
    del c
    print('late', before, ext.bombs_dropped(), flush=True)
atexit.register(late)
import dlpack_testext as ext
ext.panicking_capsule(True)  # joins: the hook is registered now, after `late` (runs first)
print('ok', flush=True)
"""


def test_a_keepalive_dropped_attached_in_a_late_atexit_callback_is_dropped():
    r = subprocess.run(
        [sys.executable, "-c", _ATEXIT_DROP], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ok, late, before, after = r.stdout.split()
    assert (ok, late) == ("ok", "late")
    # Dropped on the attached main thread: one more bomb went off.
    assert int(after) == int(before) + 1, r.stdout


# Shows a soundness hole of the dropper at interpreter exit: `drop_keepalive` drops in place
# when `!cpython::has_thread_state()`, and `has_thread_state()` answers false for every thread
# once `Py_IsInitialized()` is 0, which CPython sets right after the atexit hooks ran, for the
# whole of `Py_FinalizeEx`. So the "leaked during shutdown there" branch (SHUTTING_DOWN) is
# never reached while the interpreter finalizes: a daemon Python thread inside a pyo3 frame
# whose GIL foreign code released (torch's tensor dealloc; here a raw `PyEval_SaveThread`)
# drops a derived keepalive in place, and its `Drop`'s `Python::attach` runs with pyo3 counting
# the thread attached and the GIL not held, concurrently with the main thread's finalization
# (the very case the fix is about). SAFETY.md says it is leaked there. Fails now ("gil held:
# false" on stderr).
_FINALIZING = """
import threading, time
import dlpack_testext as ext
ext.export_detached(1).__dlpack__(max_version=(1, 3))  # a join: the dropper is installed
threading.Thread(target=ext.drop_probe_during_finalization_raw, daemon=True).start()
time.sleep(0.2)
class Slow:
    def __init__(self):
        self.sleep = time.sleep
    def __del__(self):
        self.sleep(0.5)  # keeps the finalizing main thread busy for the daemon thread
slow = Slow()
print('ok', flush=True)
"""


def test_a_keepalive_dropped_under_a_gil_released_frame_while_finalizing_is_not_run_unattached():
    r = subprocess.run(
        [sys.executable, "-c", _FINALIZING], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok"
    # Leaked (no line) or dropped with the GIL held are both fine; run without it is not.
    assert "final-probe dropped, gil held: false" not in r.stderr, r.stderr[-3000:]
