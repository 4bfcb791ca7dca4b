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
    # other in both orders, whichever table is the process's (found in review: with
    # rust-numpy's own table, a layout unlike the array's skipped the coordination and both
    # views were granted).
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
out = []
for cls in (Transposed, Reshaping):
    for f in ("tensor_mut_then_np_ro_dyn", "np_rw_dyn_then_tensor_mut"):
        x = np.zeros((4, 1), np.float32).view(cls)
        try:
            getattr(ext, f)(x, x)
            out.append("granted")
        except (BufferError, TypeError, RuntimeError):
            out.append("refused")
        assert not np.asarray(x).any(), (cls, f)
print(out)
"""
    assert _fresh(code) == str(["refused"] * 4)

