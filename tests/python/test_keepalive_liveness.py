"""Liveness of the export deleters' keepalive dropper (SAFETY.md, "When deleters run").

A derived keepalive (`#[derive(IntoDLPack)]` without `#[pyclass]`: the struct is its own
keepalive) dropped by a deleter on a Python thread whose GIL is released is queued: a pending
call drops it on the main thread, and a fallback thread (never a Python thread) drops what is
still queued 100 ms later. These reproducers (from a review of the pending-call-only version,
where each hung or held memory while the main thread was blocked) run in subprocesses.
"""

import subprocess
import sys

import pytest

from conftest import _ABI3

# Every path here queues a drop, which needs the thread state.
pytestmark = pytest.mark.skipif(_ABI3, reason="needs the thread state (not abi3)")

_JOIN = "ext.export_detached(1).__dlpack__(max_version=(1, 3))  # joins: dropper installed\n"


def _stdout(code, timeout=60):
    """The output of `code` run in a fresh interpreter, which must exit with 0."""
    r = subprocess.run(
        [sys.executable, "-c", "import dlpack_testext as ext\n" + _JOIN + code],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


# A bounded buffer pool whose derived keepalive gives its buffer back in `Drop`, cycled inside
# `py.detach` on the main thread: export, free (the deleter runs at once), take the next buffer.
# The main thread waits for a drop only a pending call on itself would run: the fallback thread
# runs it.
def test_a_detached_loop_waiting_for_a_keepalive_drop_completes():
    out = _stdout(
        "p = ext.BufferPool(1)\n"
        "print(p.cycle_detached(3, 2.0), flush=True)\n"
    )
    assert out.split() == ["3"], (
        "the pool's buffer never came back inside py.detach: the keepalive's Drop was deferred "
        f"to a pending call the (detached) main thread cannot run; rounds done: {out!r}"
    )


# The same on a worker thread while the main thread waits in `join()` (no bytecode, so no
# pending call): the fallback thread drops the keepalives.
def test_a_worker_waiting_for_a_keepalive_drop_completes_while_main_joins():
    out = _stdout(
        "import threading\n"
        "p = ext.BufferPool(2)\n"
        "out = []\n"
        "t = threading.Thread(target=lambda: out.append(p.cycle_detached(10, 2.0)))\n"
        "t.start(); t.join()\n"
        "print(out[0], flush=True)\n"
    )
    assert out.split() == ["10"], f"rounds done before the pool ran dry: {out!r}"


# A worker thread frees 5000 exports of 4 KiB one at a time inside `py.detach` while the main
# thread waits in `join()` (it runs no bytecode, so no pending call): the fallback thread drops
# them, so none is left half a second later, however long the main thread waits.
def test_a_worker_freeing_exports_while_main_joins_does_not_accumulate_them():
    out = _stdout(
        "import threading, time\n"
        "out = []\n"
        "def work():\n"
        "    ext.churn_detached(5000, 1024)\n"
        "    time.sleep(0.5)\n"
        "    out.append(ext.live_counted())\n"
        "t = threading.Thread(target=work)\n"
        "t.start(); t.join()\n"
        "print(out[0], flush=True)\n"
    )
    assert out.split() == ["0"], (
        f"{out.strip()} freed exports were still alive half a second after the worker's "
        "loop, the main thread waiting in join()"
    )


# The pending-call queue is full (32 slots on 3.11/3.12: other extensions' calls, or a burst)
# when a deleter defers: `Py_AddPendingCall` fails, and the fallback thread drops the keepalive
# (no later deferral needed).
def test_a_deferral_meeting_a_full_pending_call_queue_is_still_dropped():
    out = _stdout(
        "import time\n"
        "queued = ext.fill_pending_then_drop_detached()\n"
        "for _ in range(100000): pass\n"
        "time.sleep(0.5)\n"
        "for _ in range(100000): pass\n"
        "stranded = ext.live_counted()\n"
        "ext.drop_counted_detached()  # a later deferral schedules again\n"
        "for _ in range(100000): pass\n"
        "print(queued, stranded, ext.live_counted(), flush=True)\n"
    )
    queued, stranded, after_next = map(int, out.split())
    assert queued > 0
    assert after_next == 0
    assert stranded == 0, (
        "a keepalive deferred while the pending-call queue was full was never dropped, though "
        "the main thread ran bytecode: no retry until the next deferral"
    )


# The pool from pure Python with torch: torch's tensor dealloc releases the GIL, so a worker
# freeing tensors over pooled exports defers their drops while the main thread waits in
# `join()`; the fallback thread gives the buffers back.
def test_torch_tensors_of_pooled_exports_freed_on_a_worker_give_their_buffers_back():
    pytest.importorskip("torch")
    out = _stdout(
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
    assert out.split() == [str(i) for i in range(10)], (
        "the worker's torch tensors were freed but their keepalives (the pooled buffers) were "
        f"deferred to the joining main thread: {out!r}"
    )
