"""Finalizers that call back into the crate while it makes one of its one-time look-ups (numpy's
type, `sys.modules`, rust-numpy's table, interned names, the type descriptors an exchange-table
look-up applies, a framework's type): a garbage collection can start inside any of them (they
import modules and allocate), and its callbacks run Python code that may import a tensor
through this crate again. Each is answered, never a hang."""

import subprocess
import sys

from conftest import needs_numpy_versioned, needs_torch

_REENTER_AT_EVERY_COLLECTION = """
import gc
import numpy as np
import dlpack_testext as ext

inner = []
busy = []
first = []  # set while the crate's first calls run
during = []
def reenter(phase, info):
    if phase != "start" or busy:
        return
    during.append(bool(first))
    busy.append(1)
    try:
        inner.append(ext.add_one(np.zeros(1, np.float32)) is None)
        inner.append(ext.typed_sum(np.ones(2)) == 2.0)
        inner.append(ext.np_ro_and_tensor_ref(np.zeros(1, np.float32), np.zeros(1, np.float32)))
    except Exception as e:
        inner.append(type(e).__name__)
    finally:
        busy.pop()

gc.collect()
gc.callbacks.append(reenter)
gc.set_threshold(1)
x = np.zeros(3, np.float32)
first.append(1)
ext.add_one(x)
total = ext.typed_sum(np.ones(4))
shared = ext.np_ro_and_tensor_ref(np.zeros(2, np.float32), np.zeros(2, np.float32))
first.clear()
gc.set_threshold(700)
gc.callbacks.remove(reenter)
print(x.tolist(), total, shared, any(during), sorted(set(map(str, inner))))
"""


@needs_numpy_versioned
def test_a_collection_during_a_first_look_up_may_call_back_in():
    try:
        r = subprocess.run([sys.executable, "-c", _REENTER_AT_EVERY_COLLECTION],
                           capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("hung: a one-time look-up re-entered from a finalizer") from None
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.strip()
    assert out.startswith("[1.0, 1.0, 1.0] 4.0 0.0 "), out
    # Up to CPython 3.11 an allocation starts a collection, so the callbacks run inside the
    # first look-ups; from 3.12 collections wait for the next bytecode (nothing to check there).
    if sys.version_info < (3, 12):
        assert out.endswith(" True ['0.0', 'True']"), out


_REENTER_WITH_TORCH = """
import gc
import torch
import dlpack_testext as ext

inner = []
busy = []
first = []  # set while the crate's first calls run
during = []
def reenter(phase, info):
    if phase != "start" or busy:
        return
    during.append(bool(first))
    busy.append(1)
    try:
        inner.append(ext.typed_sum(torch.ones(2, dtype=torch.float64)) == 2.0)
        inner.append(ext.ret_torch_tripled(torch.ones(1)).tolist() == [3.0])
    except Exception as e:
        inner.append(type(e).__name__)
    finally:
        busy.pop()

gc.collect()
gc.callbacks.append(reenter)
gc.set_threshold(1)
t = torch.zeros(3)
first.append(1)
ext.add_one(t)
total = ext.typed_sum(torch.ones(4, dtype=torch.float64))
tripled = ext.ret_torch_tripled(torch.ones(2)).tolist()
first.clear()
gc.set_threshold(700)
gc.callbacks.remove(reenter)
print(t.tolist(), total, tripled, any(during), sorted(set(map(str, inner))))
"""


@needs_torch
def test_a_collection_during_a_first_torch_look_up_may_call_back_in():
    try:
        r = subprocess.run([sys.executable, "-c", _REENTER_WITH_TORCH],
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("hung: a one-time look-up re-entered from a finalizer") from None
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.strip()
    assert out.startswith("[1.0, 1.0, 1.0] 4.0 [3.0, 3.0] "), out
    if sys.version_info < (3, 12):  # as above
        assert out.endswith(" True ['True']"), out


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
