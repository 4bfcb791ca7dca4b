"""Threads and interpreter shutdown, beyond test_lifetime.py: imports and exports from many
Python threads while Rust releases the GIL, imported tensors (numpy, torch and our own)
dropped all at once on threads that never held the GIL, and interpreter exit with live
imports, unconsumed capsules, panicking keepalives, detached dropping threads and busy daemon
threads (no crash, no hang, exit code 0).
"""

import subprocess
import sys
import threading

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import collect, live, needs_torch, peer_param, torch

THREADS = 8


def run_threads(target, n=THREADS):
    errors = []
    barrier = threading.Barrier(n)

    def body(k):
        try:
            barrier.wait()
            target(k)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@needs_torch
def test_concurrent_imports_and_exports_with_gil_released(no_leaks):
    a = np.arange(256, dtype=np.uint8)
    x = torch.arange(256, dtype=torch.uint8)
    a_refs, x_uses = sys.getrefcount(a), x._use_count()
    expected = sum(range(256))

    def work(k):
        for i in range(150):
            # Import with the GIL, sum and drop with it released (deleter without the GIL).
            assert ext.checksum_detached(a) == expected
            assert ext.checksum_detached(x) == expected
            # Export built with the GIL released, consumed by numpy and torch.
            t = ext.export_detached(16 + k)
            assert np.from_dlpack(t).tolist() == [float(j) for j in range(16 + k)]
            assert torch.from_dlpack(t).sum().item() == sum(range(16 + k))
            # A counted Rust storage, consumed by Rust on this thread.
            r = ext.RustTensor(bytes([k]) * 8, "uint8", [8])
            assert ext.checksum_detached(r) == 8 * k

    run_threads(work)
    assert sys.getrefcount(a) == a_refs
    assert x._use_count() == x_uses


@needs_torch
def test_imports_dropped_concurrently_on_gil_free_threads(no_leaks):
    arrays = [np.full(64, i, dtype=np.int32) for i in range(40)]
    tensors = [torch.full((64,), i, dtype=torch.int32) for i in range(40)]
    ours = [ext.RustTensor(bytes(32), "float32", [8]) for _ in range(40)]
    refs = [sys.getrefcount(o) for o in arrays + ours]
    uses = [t._use_count() for t in tensors]
    before = live()
    # 120 imports, dropped by 8 threads at once; our exports' keepalives (Python objects) are
    # released by threads attaching to the interpreter while this thread waits, GIL released.
    ext.drop_on_threads(arrays + tensors + ours, THREADS)
    assert [sys.getrefcount(o) for o in arrays + ours] == refs
    assert [t._use_count() for t in tensors] == uses
    assert live() == before  # our storages live on in `ours`, nothing else was freed twice
    del ours
    collect()


def test_gil_free_drops_while_python_threads_run(no_leaks):
    # Rust threads drop our exports (their deleters must attach to release a Python object)
    # while other Python threads keep the interpreter busy.
    stop = threading.Event()
    spins = []

    def busy():
        n = 0
        while not stop.is_set():
            n += sum(range(100))
        spins.append(n)

    busy_threads = [threading.Thread(target=busy) for _ in range(3)]
    for t in busy_threads:
        t.start()
    try:
        before = live()
        for _ in range(20):
            objs = [ext.RustTensor(bytes(16), "int32", [4]) for _ in range(16)]
            refs = [sys.getrefcount(o) for o in objs]
            ext.drop_on_threads(list(objs), 4)
            assert [sys.getrefcount(o) for o in objs] == refs
            del objs
        collect()
        assert live() == before
    finally:
        stop.set()
        for t in busy_threads:
            t.join()
    assert len(spins) == 3


SHUTDOWN_PRELUDE = "import sys, threading, numpy as np, dlpack_testext as ext\n"

SHUTDOWN_SCENARIOS = {
    # Imported numpy, torch and Rust tensors still held by Rust at exit, plus capsules of
    # every producer nobody consumed.
    "live-imports-and-capsules": (
        "a = np.arange(8.0); x = torch.arange(8.0); t = ext.RustTensor(bytes(32), 'float32', [8])\n"
        "held = [ext.hold(a), ext.hold(x), ext.hold(t), ext.hold(ext.export_detached(4))]\n"
        "caps = [a.__dlpack__(), a.__dlpack__(max_version=(1, 0)), x.__dlpack__(),\n"
        "        t.__dlpack__(), t.__dlpack__(max_version=(1, 3)), ext.make_export_f64([3]).__dlpack__()]\n"
        "views = [np.from_dlpack(t), torch.from_dlpack(t)]\n"
        "cycle = [held]; cycle.append(cycle)  # freed by the final garbage collection, if at all\n"
    ),
    # Keepalives that panic when dropped, alive at exit in every kind of holder.
    "panicking-keepalives": (
        "caps = [ext.panicking_capsule(True), ext.panicking_capsule(False)]\n"
        "views = [np.from_dlpack(ext.panicking_tensor()), torch.from_dlpack(ext.panicking_tensor())]\n"
        "held = ext.hold(ext.panicking_tensor())\n"
        "ext.drop_on_threads([ext.panicking_tensor()], 1)\n"
    ),
    # Rust threads dropping imports of our exports (the keepalive must attach to release its
    # Python object, or leak it once shutdown began) racing the interpreter's finalization.
    "detached-drops-at-exit": (
        "objs = [ext.RustTensor(bytes(64), 'uint8', [64]), ext.make_tensor(bytes(8), 'uint8', [8])]\n"
        "for _ in range(40):\n"
        "    for o in objs:\n"
        "        ext.drop_on_detached_thread(o)\n"
    ),
    # Daemon threads in the middle of imports and exports (GIL released in Rust, drops on
    # GIL-free threads) when the main thread exits.
    "busy-daemon-threads": (
        "started = threading.Barrier(5)\n"
        "def loop():\n"
        "    started.wait()\n"
        "    while True:\n"
        "        ext.checksum_detached(ext.export_detached(8))\n"
        "        np.from_dlpack(ext.export_detached(8))\n"
        "        ext.drop_on_threads([ext.RustTensor(bytes(8), 'uint8', [8]), ext.export_detached(4)], 2)\n"
        "for _ in range(4):\n"
        "    threading.Thread(target=loop, daemon=True).start()\n"
        "started.wait()\n"
    ),
}
# Not here, on purpose: numpy or torch tensors whose deleters run on a daemon or Rust thread
# while the interpreter finalizes. Their deleters take the GIL themselves, and CPython 3.11
# ends such a thread with pthread_exit, whose forced unwind aborts the process when it meets
# C++ or Rust frames ("terminate called without an active exception", "FATAL: exception not
# rethrown"). torch alone shows it (`torch.from_dlpack(ndarray)` in a daemon loop), so it is
# the producers' and CPython's limitation; our own deleters never take the GIL once shutdown
# has begun (PyKeepalive leaks instead), and a PyTensor dropped off the GIL after our atexit
# hook ran leaks the producer's tensor rather than call its deleter (tested below). What is
# left is a drop already waiting for the GIL when finalization starts.


# The scenarios that use torch: the child imports it for those only, and they need it here.
SHUTDOWN_TORCH = {name for name, code in SHUTDOWN_SCENARIOS.items() if "torch." in code}


@pytest.mark.parametrize(
    "scenario",
    [peer_param(name, peers=["torch"] if name in SHUTDOWN_TORCH else [])
     for name in sorted(SHUTDOWN_SCENARIOS)],
)
def test_interpreter_shutdown(scenario):
    prelude = SHUTDOWN_PRELUDE + ("import torch\n" if scenario in SHUTDOWN_TORCH else "")
    code = prelude + SHUTDOWN_SCENARIOS[scenario] + "print('ok', flush=True)\n"
    # The timeout only turns a hang into a failure; no duration is asserted.
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.strip() == "ok"
    if scenario == "panicking-keepalives":
        # The one dropped before exit reported its panic; none unwound into C (exit code 0).
        assert "a keepalive panicked while being dropped by a DLPack deleter" in r.stderr


def test_imports_dropped_off_gil_after_exit_began_are_leaked():
    """Once the interpreter is shutting down, a thread without the GIL must not run a
    producer's deleter (numpy's takes the GIL itself): the import is leaked instead, while the
    same drop before shutdown releases the producer's reference."""
    code = (
        "import atexit, sys, numpy as np, dlpack_testext as ext\n"
        "def late():\n"
        "    # atexit runs hooks last-registered-first: this one runs after dlpack-rs's own hook,\n"
        "    # which the first import below installs.\n"
        "    b = np.arange(4.0)\n"
        "    r0 = sys.getrefcount(b)\n"
        "    ext.drop_on_threads([b], 1)\n"
        "    print('after-exit', sys.getrefcount(b) - r0, flush=True)\n"
        "atexit.register(late)\n"
        "a = np.arange(4.0)\n"
        "r0 = sys.getrefcount(a)\n"
        "ext.drop_on_threads([a], 1)\n"
        "print('before-exit', sys.getrefcount(a) - r0, flush=True)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-4000:]
    # Before shutdown the deleter ran (the reference numpy's capsule held is gone); after it
    # began, the tensor was leaked (the reference stays). The import holds no reference of its
    # own: with this crate's rust-numpy table its borrows are keyed once, at import.
    assert r.stdout.split() == ["before-exit", "0", "after-exit", "1"]
