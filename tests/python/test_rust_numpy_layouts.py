"""rust-numpy's borrows of a numpy array whose layout is not the import's: a subclass whose
`__dlpack__` exports the array transposed, or reshapes it in place. Each runs in a fresh
interpreter, under the table it names (this crate's, or rust-numpy's own)."""

import subprocess
import sys

import pytest

from conftest import needs_numpy_versioned

TABLES = {
    "ours": "ext.add_one(np.zeros(1, np.float32))",
    "rust-numpy": "ext.np_ro_and_tensor_ref(np.zeros(1, np.float32), np.zeros(1, np.float32))",
}


def _fresh(code):
    """Runs `code` in a fresh interpreter (no table published yet), which must exit 0."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


@needs_numpy_versioned
@pytest.mark.parametrize("first", ["ours", "rust-numpy"])
def test_a_subclass_exporting_itself_in_another_layout_is_coordinated(first):
    # A numpy subclass whose __dlpack__ hands over the array's own memory in another layout (its
    # transpose, or itself just before reshaping itself in place) still addresses the array's
    # bytes: rust-numpy's views of the array and our mutable view of the import refuse each
    # other, whichever table is the process's (found in review: with rust-numpy's own table, a
    # layout unlike the array's skipped the coordination and both views were granted). Beside
    # another array both are granted. A subclass exporting a copy (memory wholly outside the
    # array's base, contiguous or not) is not coordinated and is granted; one exporting memory that lies partly
    # in the base cannot be told to rust-numpy and is refused under rust-numpy's table. (A
    # reshape while rust-numpy holds a borrow of the array is outside the model: SAFETY.md.)
    code = f"""
import numpy as np, dlpack_testext as ext
{TABLES[first]}  # publishes the table
class Transposed(np.ndarray):
    def __dlpack__(self, **kw):
        return np.ndarray.__dlpack__(self.T, **kw)
class Reshaping(np.ndarray):
    def __dlpack__(self, **kw):
        capsule = np.ndarray.__dlpack__(self, **kw)
        self.shape = (self.size,)
        return capsule
class Copying(np.ndarray):
    def __dlpack__(self, **kw):
        return np.ndarray.__dlpack__(np.array(self), **kw)
buf = bytearray(64)
class Straddling(np.ndarray):  # all of `buf`, where the array is its first half
    def __dlpack__(self, **kw):
        return np.ndarray.__dlpack__(np.frombuffer(buf, np.float32).reshape(16, 1), **kw)
def outcome(f, *args):
    try:
        getattr(ext, f)(*args)
        return "granted"
    except (BufferError, TypeError, RuntimeError) as e:
        return "BufferError" if type(e) is BufferError else "refused"
out = []
for cls, f, same in (
    (Transposed, "tensor_mut_then_np_ro_dyn", True),
    (Transposed, "np_rw_dyn_then_tensor_mut", True),
    (Reshaping, "tensor_mut_then_np_ro_dyn", True),
    (Transposed, "tensor_mut_then_np_ro_dyn", False),
    (Transposed, "np_rw_dyn_then_tensor_mut", False),
    (Reshaping, "tensor_mut_then_np_ro_dyn", False),
    (Copying, "tensor_mut_then_np_ro_dyn", True),
):
    x = np.zeros((4, 1), np.float32).view(cls)
    other = x if same else np.zeros((4, 1), np.float32)
    args = (other, x) if f.startswith("np_rw") else (x, other)
    out.append(outcome(f, *args))
    if same or cls is Copying:
        assert not np.asarray(x).any(), (cls, f)  # refused before any write, or wrote a copy
x = np.frombuffer(buf, np.float32, count=8).reshape(8, 1).view(Straddling)
out.append(outcome("tensor_mut_then_np_ro_dyn", x, np.zeros((1, 1), np.float32)))
# A copy of an array over a non-contiguous base: other memory, whatever the base's layout.
x = np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), (4, 1), (8, 4)).view(Copying)
out.append(outcome("tensor_mut_then_np_ro_dyn", x, x))
print(" ".join(out))
"""
    refused = {"BufferError", "refused"}
    out = _fresh(code).split()
    assert set(out[:2]) <= refused and out[2] in refused, out
    assert out[3:7] == ["granted"] * 4, out
    assert out[7] == ("BufferError" if first == "rust-numpy" else "granted"), out
    assert out[8] == "granted", out
