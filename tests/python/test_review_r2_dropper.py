"""Review (r2) of the pending-call keepalive dropper (SAFETY.md, "When deleters run").

A derived keepalive (`#[derive(IntoDLPack)]` without `#[pyclass]`: the struct is its own
keepalive) dropped by a deleter on a Python thread whose GIL is released is queued for a
`Py_AddPendingCall` callback that only the main thread runs, at its next eval-breaker check.
So its `Drop` no longer runs when the deleter returns: maybe much later, maybe never. Each test
below is a reproducer of one consequence, run in a subprocess (hangs and queue floods stay
there). All of them fail at ea4ba97 (except under abi3, where the dropper attaches for real).
"""

import subprocess
import sys

import pytest

from conftest import _ABI3

_JOIN = "ext.export_detached(1).__dlpack__(max_version=(1, 3))  # joins: dropper installed\n"


def _run(code, timeout=60):
    return subprocess.run(
        [sys.executable, "-c", "import dlpack_testext as ext\n" + _JOIN + code],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# FAILS NOW (hang, bounded here by the pool's own 2 s timeout). A bounded buffer pool whose
# derived keepalive gives its buffer back in `Drop`, cycled inside `py.detach` on the main thread:
# export, free (no consumer: the deleter runs at once), take the next buffer. The deleter defers
# the drop to a pending call that only the main thread runs, and the main thread is inside
# `py.detach` waiting for that very buffer: a single-threaded deadlock from safe code. Dropped in
# place (before the dropper) or attached for real (the previous version) it completes. The same
# hang happens on a worker thread while the main thread waits in `join()`/`Event.wait()`/
# `future.result()` (no bytecode, so no pending calls), and torch's tensor dealloc reaches it too.
@pytest.mark.skipif(_ABI3, reason="abi3 attaches for real instead of deferring")
def test_a_detached_loop_waiting_for_a_keepalive_drop_completes():
    r = _run(
        "p = ext.BufferPool(1)\n"
        "print(p.cycle_detached(3, 2.0), flush=True)\n"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["3"], (
        "the pool's buffer never came back inside py.detach: the keepalive's Drop was deferred "
        f"to a pending call the (detached) main thread cannot run; rounds done: {r.stdout!r}"
    )


# FAILS NOW. The same on a worker thread while the main thread waits in `join()`: the worker
# cycles a 2-buffer pool; every drop is deferred to the main thread, which runs no bytecode
# until the worker ends.
@pytest.mark.skipif(_ABI3, reason="abi3 attaches for real instead of deferring")
def test_a_worker_waiting_for_a_keepalive_drop_completes_while_main_joins():
    r = _run(
        "import threading\n"
        "p = ext.BufferPool(2)\n"
        "out = []\n"
        "t = threading.Thread(target=lambda: out.append(p.cycle_detached(10, 2.0)))\n"
        "t.start(); t.join()\n"
        "print(out[0], flush=True)\n"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["10"], f"rounds done before the pool ran dry: {r.stdout!r}"


# FAILS NOW (memory growth). A worker thread frees 5000 exports of 4 KiB one at a time inside
# `py.detach` while the main thread waits in `join()`: every keepalive (with its data) is queued
# for the main thread, so all 5000 (20 MiB here; any size, any count in a long-running worker)
# are alive when the loop ends. Bounded growth would need the queue drained by someone other
# than the main thread's eval loop.
@pytest.mark.skipif(_ABI3, reason="abi3 attaches for real instead of deferring")
def test_a_worker_freeing_exports_while_main_joins_does_not_accumulate_them():
    r = _run(
        "import threading\n"
        "out = []\n"
        "t = threading.Thread(target=lambda: out.append(ext.churn_detached(5000, 1024)))\n"
        "t.start(); t.join()\n"
        "for _ in range(1000): pass\n"
        "print(out[0], ext.live_counted(), flush=True)\n"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    alive_at_loop_end, alive_after = map(int, r.stdout.split())
    assert alive_after == 0  # they do go once the main thread runs bytecode again
    assert alive_at_loop_end < 100, (
        f"{alive_at_loop_end} freed exports (keepalive and data) were still alive at the end of "
        "the worker's loop: deferred to a main thread that was waiting in join()"
    )


# FAILS NOW. The pending-call queue is full (32 slots on 3.11/3.12: other extensions' calls, or
# a burst) when a deleter defers: `Py_AddPendingCall` fails, `SCHEDULED` goes back to false, and
# nothing retries. The keepalive stays in `PENDING` however much bytecode the main thread runs,
# until some later deferral happens to schedule again (maybe never: then it is held for good).
@pytest.mark.skipif(_ABI3, reason="abi3 attaches for real instead of deferring")
def test_a_deferral_meeting_a_full_pending_call_queue_is_still_dropped():
    r = _run(
        "import time\n"
        "queued = ext.fill_pending_then_drop_detached()\n"
        "for _ in range(100000): pass\n"
        "time.sleep(0.1)\n"
        "for _ in range(100000): pass\n"
        "stranded = ext.live_counted()\n"
        "ext.drop_counted_detached()  # a later deferral schedules again\n"
        "for _ in range(100000): pass\n"
        "print(queued, stranded, ext.live_counted(), flush=True)\n"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    queued, stranded, after_next = map(int, r.stdout.split())
    assert queued > 0
    assert after_next == 0
    assert stranded == 0, (
        "a keepalive deferred while the pending-call queue was full was never dropped, though "
        "the main thread ran bytecode: no retry until the next deferral"
    )


# FAILS NOW (deadlock, bounded by the Drop's own 2 s try-lock). A deferred drop runs on the main
# thread at an arbitrary bytecode boundary, with the GIL held: here inside a Python callback that
# Rust calls while holding a (non-reentrant) `Mutex`; the keepalive's `Drop` takes that same
# `Mutex`, freed on a worker thread inside `py.detach`. Dropped where it was freed (in place,
# before 25282a0) it would wait for the callback to return; deferred, the main thread waits for
# itself. (The previous version, attaching for real on the worker, hung too: the worker held the
# GIL waiting for the lock, the main thread needed the GIL back to leave `sleep`. Any design that
# runs such a `Drop` holding the GIL has this; only a drop without the GIL avoids it.)
@pytest.mark.skipif(_ABI3, reason="abi3 attaches for real instead of deferring")
def test_a_deferred_drop_does_not_reenter_a_lock_the_main_thread_holds():
    r = _run(
        "import threading, time\n"
        "def cb():\n"
        "    t = threading.Thread(target=ext.drop_locking_detached)\n"
        "    t.start()\n"
        "    time.sleep(0.3)\n"
        "    for _ in range(100000): pass\n"
        "ext.with_rust_lock(cb)\n"
        "time.sleep(0.5)\n"
        "print(ext.lock_drop_timeouts(), flush=True)\n"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["0"], (
        "the keepalive's Drop, deferred to the main thread, ran inside a callback while that "
        "thread held the lock the Drop takes (self-deadlock; given up after 2 s)"
    )


# FAILS NOW (regression from 56591c9, which dropped it). A derived export held by a module global
# is freed by the main thread (attached, holding the GIL) while the interpreter finalizes
# (`finalize_modules` runs after `Py_IsInitialized()` turned 0): `thread_states()` refuses to read
# the thread state once not initialized, so `drop_at` answers "not attached", then `Never`: the
# keepalive leaks and its `Drop` (here a line on stderr; a file flush, a temp-file removal, device
# memory for an embedder that finalizes and goes on) never runs, though the thread could drop it.
def test_a_keepalive_freed_by_the_attached_main_thread_while_finalizing_is_dropped():
    r = _run(
        "h = ext.ProbeHolder()  # freed when __main__ is cleared, after Py_IsInitialized() is 0\n"
        "h2 = ext.ProbeHolder(); del h2  # freed now\n"
        "print('ok', flush=True)\n"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok"
    assert r.stderr.count("exit-probe dropped") == 2, (
        "the keepalive freed by the attached main thread during finalization was leaked: "
        + r.stderr[-2000:]
    )


# FAILS NOW (hang, bounded by the pool's 2 s timeout). The pool hang from pure Python with torch:
# a worker thread imports pooled exports into torch and deletes the tensors; torch's tensor
# dealloc releases the GIL, so every deleter defers its keepalive to the main thread, which waits
# in `join()` and runs no pending call: the pool runs dry. Passed at 56591c9 (attached for real).
@pytest.mark.skipif(_ABI3, reason="abi3 attaches for real instead of deferring")
def test_torch_tensors_of_pooled_exports_freed_on_a_worker_give_their_buffers_back():
    pytest.importorskip("torch")
    r = _run(
        "import threading, torch\n"
        "p = ext.BufferPool(1)\n"
        "out = []\n"
        "def work():\n"
        "    try:\n"
        "        for i in range(10):\n"
        "            t = torch.from_dlpack(p.take_capsule(2.0))\n"
        "            del t\n"
        "            out.append(i)\n"
        "    except Exception as e:\n"
        "        out.append(type(e).__name__)\n"
        "th = threading.Thread(target=work); th.start(); th.join()\n"
        "print(*out, flush=True)\n",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == [str(i) for i in range(10)], (
        "the worker's torch tensors were freed but their keepalives (the pooled buffers) were "
        f"deferred to the joining main thread: {r.stdout!r}"
    )
