"""Finalizers that call back into the crate while it makes one of its one-time look-ups (numpy's
type, `sys.modules`, rust-numpy's table, interned names): a garbage collection can start inside
any of them (they import modules and allocate), and its callbacks run Python code that may
import a tensor through this crate again. Each is answered, never a hang."""

import subprocess
import sys

from conftest import needs_numpy_versioned

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
