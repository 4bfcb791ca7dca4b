"""Lifetimes of our exports: deleters run exactly once, on any thread; refcounts return."""

import gc
import sys
import time

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import (
    by_peer,
    collect,
    jnp,
    live,
    needs,
    _ABI3,
    needs_numpy_versioned,
    needs_torch,
    peer_param,
    rust_tensor,
    torch,
)


@pytest.mark.parametrize("consumer", by_peer(["numpy", "torch", "jax", "rust"]))
@pytest.mark.parametrize("kind", ["ready", "class"])
def test_owner_deleted_first_then_consumer_reads(consumer, kind, no_leaks):
    before = live()
    t, a = rust_tensor("float64", (2, 3), kind)
    if consumer == "numpy":
        c = np.from_dlpack(t)
        read = lambda: np.asarray(c).tobytes()  # noqa: E731
    elif consumer == "torch":
        c = torch.from_dlpack(t)
        read = lambda: c.numpy().tobytes()  # noqa: E731
    elif consumer == "jax":
        c = jnp.from_dlpack(t)
        read = lambda: np.asarray(c).tobytes()  # noqa: E731
    else:
        c = ext.hold(t)
        read = c.to_bytes
    del t
    collect()
    assert live() == before + 1  # the consumer keeps the Rust storage alive
    assert read() == a.tobytes()
    del c, read
    collect()
    assert live() == before  # dropped exactly once


@needs("torch", "jax")
def test_refcount_of_our_object_returns(no_leaks):
    t, _ = rust_tensor("int64", (3,), "class")
    start = sys.getrefcount(t)
    consumers = [np.from_dlpack(t), torch.from_dlpack(t), jnp.from_dlpack(t), ext.hold(t)]
    assert sys.getrefcount(t) >= start + 3  # each export holds the Python object
    del consumers
    collect()
    assert sys.getrefcount(t) == start
    for _ in range(10):
        t.__dlpack__()  # unconsumed capsules release it in their destructor
        t.__dlpack__(max_version=(1, 3))
    assert sys.getrefcount(t) == start


@needs_torch
def test_deleters_counted_exactly_once(no_leaks):
    created0, dropped0 = ext.counters()
    ts = [rust_tensor("uint8", (4,), kind)[0] for kind in ("ready", "class") for _ in range(5)]
    arrays = [np.from_dlpack(t) for t in ts] + [torch.from_dlpack(t) for t in ts]
    created1, dropped1 = ext.counters()
    assert created1 - created0 == 10 and dropped1 == dropped0
    del ts
    collect()
    assert ext.counters()[1] == dropped0
    del arrays
    collect()
    assert ext.counters() == (created0 + 10, dropped0 + 10)


def test_deleter_on_non_python_thread_without_gil(no_leaks):
    # Our deleter (holding a Python object) runs on a thread that never held the GIL,
    # while the Python thread waits with the GIL released.
    before = live()
    t, a = rust_tensor("float32", (8,), "class")
    start = sys.getrefcount(t)
    h = ext.hold(t)
    assert sys.getrefcount(t) == start + 1
    del t
    gc.collect()
    assert h.to_bytes() == a.tobytes()
    counts = ext.keepalive_counts()
    h.release_on_thread()
    # The path taken: released after attaching the Rust thread (not leaked, not attached).
    after = ext.keepalive_counts()
    assert after["after_attaching"] == counts["after_attaching"] + 1
    assert after["attached"] == counts["attached"]
    collect()
    assert live() == before


def test_deleter_on_thread_while_gil_busy(no_leaks):
    # The deleter's thread must wait for the GIL while this thread holds it (spinning in Rust,
    # never releasing it), then release the object by attaching.
    t, _ = rust_tensor("int32", (4,), "class")
    start = sys.getrefcount(t)
    # `t`'s count as the method reads it, with no hold: the call's argument stands in for
    # getrefcount's own, plus the argument tuple's reference where the method takes one (under
    # abi3, with CPython 3.9's limited API, pyo3 builds METH_VARARGS methods).
    idle = ext.hold(np.zeros(1))
    idle.release()
    in_call, _ = idle.release_on_thread_while_holding_gil(t, 0.0)  # drops nothing
    assert in_call in (start, start + 1)
    h = ext.hold(t)
    assert sys.getrefcount(t) == start + 1
    counts = ext.keepalive_counts()
    refs, released = h.release_on_thread_while_holding_gil(t, 0.3)
    # Read at the end of the spin, GIL still held: the deleter's thread was waiting.
    assert refs == in_call + 1
    assert released == counts["after_attaching"]
    # (CPython 3.11's current-thread-state read is the GIL holder's: a keepalive dropped on a
    # thread that never attached was taken for attached and released without the GIL.)
    assert ext.keepalive_counts()["attached"] == counts["attached"]
    deadline = time.time() + 10
    while sys.getrefcount(t) != start and time.time() < deadline:
        time.sleep(0.001)  # releases the GIL: now the deleter's thread attaches
    assert sys.getrefcount(t) == start
    after = ext.keepalive_counts()
    assert after["after_attaching"] == counts["after_attaching"] + 1
    assert after["leaked_at_shutdown"] == counts["leaked_at_shutdown"]


@needs_torch
def test_torch_frees_from_its_side(no_leaks):
    before = live()
    t, _ = rust_tensor("float32", (1000,), "ready")
    x = torch.from_dlpack(t)
    y = x[10:20]  # a view keeps the storage alive
    del t, x
    collect()
    assert live() == before + 1
    assert y.sum().item() == pytest.approx(sum(i * 0.25 - 1.5 for i in range(10, 20)))
    del y
    collect()
    assert live() == before


@needs_torch
def test_shutdown_with_live_exports(tmp_path):
    # Exports still alive at interpreter exit must neither crash nor hang the shutdown.
    import subprocess

    code = (
        "import numpy as np, torch, threading, dlpack_testext as ext\n"
        "t = ext.RustTensor(bytes(16), 'float32', [4])\n"
        "keep = [np.from_dlpack(t), torch.from_dlpack(t), ext.hold(t)]\n"
        "cap = t.__dlpack__()\n"
        "h = ext.hold(t)\n"
        "h.release_on_detached_thread()\n"
        "ext.report_keepalive_counts_at_exit()\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    # The process got past finalization (the C atexit handler runs after it), and which paths
    # the keepalives took is on record: every one alive at exit was released or leaked, none
    # crossed interpreters.
    line = r.stderr.split("keepalive counts at exit:")[1].splitlines()[0]
    counts = {k: int(v) for k, v in (kv.split("=") for kv in line.split())}
    assert counts["leaked_other_interpreter"] == 0, r.stderr
    assert counts["attached"] + counts["after_attaching"] + counts["leaked_at_shutdown"] >= 1


# A deleter of ours running where pyo3's attach count and CPython's thread state disagree: inside
# a pyo3 frame, with the GIL released by foreign code (torch drops the storage of a tensor with
# the GIL released while a PyTensor holding it is dropped by a pyclass's dealloc). Each chain runs
# in a subprocess: the failure is a fatal error of the interpreter.
_RELEASE_CHAINS = {
    # Deterministic, on every CPython: the GIL released by a raw PyEval_SaveThread.
    "raw": (
        "b = ext.derived_vector([1.0, 2.0, 3.0])\n"
        "h = ext.hold(b)\n"
        "del b\n"
        "h.release_with_gil_released_raw()\n"
    ),
    # The client's chain: torch's exchange table holds our export; the holder is deallocated.
    "torch": (
        "import torch\n"
        "b = ext.derived_vector([1.0, 2.0, 3.0])\n"
        "t = torch.from_dlpack(b)\n"
        "h = ext.hold(t)\n"
        "del b, t\n"
        "del h\n"
    ),
    "numpy": (
        "b = ext.derived_vector([1.0, 2.0, 3.0])\n"
        "a = np.from_dlpack(b)\n"
        "h = ext.hold(a)\n"
        "del b, a\n"
        "del h\n"
    ),
    "jax": (
        "import jax.numpy as jnp\n"
        "b = ext.derived_vector([1.0, 2.0, 3.0])\n"
        "a = jnp.from_dlpack(b)\n"
        "h = ext.hold(a)\n"
        "del b, a\n"
        "del h\n"
    ),
}


@pytest.mark.parametrize(
    "holder",
    [
        peer_param(k, peers=[k] if k in ("torch", "jax") else [])
        if k != "numpy"
        # numpy 2.0 imports our legacy capsule read-only and refuses to export it again.
        else pytest.param(k, marks=needs_numpy_versioned)
        for k in _RELEASE_CHAINS
    ],
)
def test_deleter_with_gil_released_under_a_pyo3_frame(holder):
    import subprocess

    code = (
        "import gc, numpy as np, dlpack_testext as ext\n"
        + _RELEASE_CHAINS[holder]
        + "gc.collect()\n"
        # A keepalive dropped where the GIL was released is queued for a pending call: wait.
        "import time\n"
        "for _ in range(1000):\n"
        "    if ext.derived_dropped():\n"
        "        break\n"
        "    time.sleep(0.01)\n"
        "c = ext.keepalive_counts()\n"
        "print('ok', c['attached'] + c['after_attaching'], c['after_attaching'],"
        " ext.derived_dropped(), c['deleter_deferred'])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    ok, released, after_attaching, dropped, deleter_deferred = r.stdout.split()
    assert ok == "ok"
    # The export's keepalive (the derived object) was released, not leaked, and the object
    # itself was dropped.
    assert int(released) >= 1
    assert int(dropped) >= 1
    if holder == "raw":
        # Released attached for real: the deleter (its thread's GIL released under pyo3's frame)
        # queued the keepalive, and the main thread's pending call released it holding the GIL
        # (under abi3 the deleter attaches itself, and so does the keepalive, re-entrantly).
        assert (int(after_attaching), int(deleter_deferred)) == (1 if _ABI3 else 0, 1)


# The same place for a keepalive that is not a `PyKeepalive`: a derived struct exported without
# `#[pyclass]` is its own keepalive, and a field whose `Drop` asks pyo3 to attach must then be
# attached for real (pyo3 still counts the thread attached inside the pyo3 frame; without the fix
# it ran Python code without the GIL).
_ATTACH_CHAINS = {
    "raw": (
        "h = ext.hold(ext.attach_on_drop())\n"
        "h.release_with_gil_released_raw()\n"
    ),
    "torch": (
        "import torch\n"
        "t = torch.from_dlpack(ext.attach_on_drop())\n"
        "h = ext.hold(t)\n"
        "del t\n"
        "del h\n"
    ),
}


@pytest.mark.parametrize(
    "chain", [peer_param(k, peers=[k] if k == "torch" else []) for k in _ATTACH_CHAINS]
)
def test_a_keepalive_drop_that_attaches_is_attached(chain):
    import subprocess

    code = (
        "import gc, dlpack_testext as ext\n"
        + _ATTACH_CHAINS[chain]
        + "gc.collect()\n"
        # Queued for a pending call: wait for it.
        "import time\n"
        "for _ in range(1000):\n"
        "    if ext.attach_seen():\n"
        "        break\n"
        "    time.sleep(0.01)\n"
        "print('ok', ext.attach_seen(), ext.keepalive_counts()['deleter_deferred'])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    ok, seen, deleter_deferred = r.stdout.split()
    assert ok == "ok"
    assert int(deleter_deferred) == 1
    # 1: the drop ran and pyo3's attach held the GIL (3 where abi3 hides the check).
    assert int(seen) == (3 if _ABI3 else 1), r.stderr[-3000:]
