"""Finalizers that call back into the crate while it works: a garbage collection can start
inside its one-time look-ups (numpy's type, `sys.modules`, rust-numpy's table, joining the
borrow registry: they import modules and allocate), and its callbacks run Python code that may
import a tensor through this crate again (answered, never a hang); or make an array read-only
before a writable argument's borrow (refused)."""

import ast
import subprocess
import sys

from conftest import needs_numpy_versioned

_REENTER_AT_THE_KTH_COLLECTION = """
import gc
import sys
import numpy as np
import dlpack_testext as ext

k = int(sys.argv[1])
calls = []  # set while the crate's first calls run
starts = []  # per collection: whether it started inside them
inner = []
def reenter(phase, info):
    if phase != "start":
        return
    starts.append(bool(calls))
    if len(starts) == k:
        # This crate's functions only: rust-numpy's own one-time look-up of numpy's C API
        # (re-entered here from the outer call's rust-numpy argument) waits for itself.
        try:
            inner.append(ext.add_one(np.zeros(1, np.float32)) is None)
            inner.append(ext.typed_sum(np.ones(2)) == 2.0)
        except Exception as e:
            inner.append(type(e).__name__)

x, ones = np.zeros(3, np.float32), np.ones(4)
pair = (np.zeros(2, np.float32), np.zeros(2, np.float32))
gc.collect()
gc.callbacks.append(reenter)
gc.set_threshold(1)
calls.append(1)
ext.add_one(x)
total = ext.typed_sum(ones)
shared = ext.np_ro_and_tensor_ref(*pair)
calls.clear()
gc.set_threshold(700)
gc.callbacks.remove(reenter)
print(x.tolist(), total, shared, inner, "|", [i + 1 for i, v in enumerate(starts) if v])
"""


def _run_kth(k):
    try:
        r = subprocess.run([sys.executable, "-c", _REENTER_AT_THE_KTH_COLLECTION, str(k)],
                           capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hung: re-entered at collection {k} of the first calls") from None
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


@needs_numpy_versioned
def test_a_collection_during_a_first_look_up_may_call_back_in():
    # Each collection that starts inside the crate's first calls (in a fresh interpreter: the
    # look-ups are once per process) re-enters the crate in turn. Up to CPython 3.11 an
    # allocation starts a collection; from 3.12 collections wait for the next bytecode, so
    # none starts inside the crate there.
    prefix = "[1.0, 1.0, 1.0] 4.0 0.0 "
    k = 1
    while True:
        out = _run_kth(k)
        assert out.startswith(prefix), (k, out)
        if k not in ast.literal_eval(out.split("|")[1].strip()):
            break  # no k-th collection inside the first calls
        assert out.startswith(prefix + "[True, True] |"), (k, out)
        k += 1
    if sys.version_info < (3, 12):
        assert k > 3, out


# A garbage collection during the extraction of a writable typed argument whose callback (as a
# finalizer could) makes the array read-only, and checks with a shared view whether the
# argument's exclusive borrow exists yet. Before it does, the argument must see the flag.
_READ_ONLY_MID_EXTRACTION = """
import gc
import numpy as np
import dlpack_testext as ext

{start}
ext.tensor_mut_then_np_rw(np.zeros(2, np.float32), np.zeros(2, np.float32))  # one-time look-ups
wrong = []
refused_in_time = []
for k in range(1, 300):
    base = np.zeros(16, np.float32)
    x, y = base[:8], base[8:]
    starts = []
    calling = []
    def change(phase, info):
        if phase == "start":
            starts.append(None)
            if len(starts) == k and not calling:
                starts[k - 1] = "before the call"
            elif len(starts) == k:
                x.flags.writeable = False
                ran = float(x[0]) != 0.0  # the function's body adds 1 to x[0]
                try:
                    ext.typed_numel(x)
                    starts[k - 1] = "ran" if ran else "unborrowed"
                except BufferError:
                    starts[k - 1] = "borrowed"
    gc.collect()
    gc.callbacks.append(change)
    gc.set_threshold(1)
    try:
        calling.append(1)
        ext.tensor_mut_then_np_rw(x, y)
        granted = True
    except BufferError:
        granted = False
    finally:
        gc.set_threshold(700)
        gc.callbacks.remove(change)
    if len(starts) < k:
        break
    if starts[k - 1] == "unborrowed":
        (wrong if granted else refused_in_time).append(k)
print(repr(wrong).replace(" ", ""), len(refused_in_time) > 0)
"""


@needs_numpy_versioned
def test_an_array_made_read_only_before_the_borrow_refuses_a_writable_argument():
    # Found by a gc-callback sweep: the writable flag was read with the array's struct, and
    # rust-numpy's private views of the array (Python code) were made before the borrow. With
    # rust-numpy's own table (this crate's makes no such views once it has joined the registry).
    start = "ext.rust_numpy_numel(np.zeros(1, np.float32))  # rust-numpy's table first"
    r = subprocess.run([sys.executable, "-c", _READ_ONLY_MID_EXTRACTION.format(start=start)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    wrong, refused_in_time = r.stdout.split()
    assert wrong == "[]", r.stdout
    # Up to CPython 3.11 collections start inside the extraction, and one made the array
    # read-only before the borrow existed (and was refused); from 3.12 collections wait for the
    # next bytecode.
    if sys.version_info < (3, 12):
        assert refused_in_time == "True", r.stdout
