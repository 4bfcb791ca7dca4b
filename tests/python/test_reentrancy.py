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
def reenter(phase, info):
    if phase != "start" or busy:
        return
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
ext.add_one(x)
total = ext.typed_sum(np.ones(4))
shared = ext.np_ro_and_tensor_ref(np.zeros(2, np.float32), np.zeros(2, np.float32))
gc.set_threshold(700)
gc.callbacks.remove(reenter)
print(x.tolist(), total, shared, len(inner) > 0, sorted(set(map(str, inner))))
"""


@needs_numpy_versioned
def test_a_collection_during_a_first_look_up_may_call_back_in():
    try:
        r = subprocess.run([sys.executable, "-c", _REENTER_AT_EVERY_COLLECTION],
                           capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("hung: a one-time look-up re-entered from a finalizer") from None
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[1.0, 1.0, 1.0] 4.0 0.0 True ['0.0', 'True']", r.stdout


_REENTER_WITH_TORCH = """
import gc
import torch
import dlpack_testext as ext

inner = []
busy = []
def reenter(phase, info):
    if phase != "start" or busy:
        return
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
ext.add_one(t)
total = ext.typed_sum(torch.ones(4, dtype=torch.float64))
tripled = ext.ret_torch_tripled(torch.ones(2)).tolist()
gc.set_threshold(700)
gc.callbacks.remove(reenter)
print(t.tolist(), total, tripled, len(inner) > 0, sorted(set(map(str, inner))))
"""


@needs_torch
def test_a_collection_during_a_first_torch_look_up_may_call_back_in():
    try:
        r = subprocess.run([sys.executable, "-c", _REENTER_WITH_TORCH],
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("hung: a one-time look-up re-entered from a finalizer") from None
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[1.0, 1.0, 1.0] 4.0 [3.0, 3.0] True ['True']", r.stdout


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
for k in range(1, 300):
    base = np.zeros(16, np.float32)
    x, y = base[:8], base[8:]
    starts = []
    def change(phase, info):
        if phase == "start":
            starts.append(None)
            if len(starts) == k:
                x.flags.writeable = False
                try:
                    ext.typed_numel(x)
                    starts[k - 1] = "unborrowed"
                except BufferError:
                    starts[k - 1] = "borrowed"
    gc.collect()
    gc.callbacks.append(change)
    gc.set_threshold(1)
    try:
        ext.tensor_mut_then_np_rw(x, y)
        granted = True
    except BufferError:
        granted = False
    finally:
        gc.set_threshold(700)
        gc.callbacks.remove(change)
    if len(starts) < k:
        break
    if granted and starts[k - 1] == "unborrowed":
        wrong.append(k)
print(wrong, k > 1)
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
    assert r.stdout.strip() == "[] True", r.stdout
