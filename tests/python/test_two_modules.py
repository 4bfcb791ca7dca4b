"""Two copies of dlpack-rs in one interpreter: the test extension and `dlpack_twin` (the same
cross-module functions, tests/pyext/src/cross.rs). Memory one copy holds a live borrow of must
not be reachable by the other through any route (its table's lend, its table's export, its
`__dlpack__`) before the first copy's borrows live in the shared registry. Each scenario runs in
a fresh interpreter (so that neither module has joined the registry before), in both orders.
"""

import subprocess
import sys
import textwrap

import pytest

from conftest import needs_numpy_versioned

ORDERS = [("dlpack_testext", "dlpack_twin"), ("dlpack_twin", "dlpack_testext")]


def _run(code):
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


SCENARIO = """
import importlib
a = importlib.import_module({a!r})
b = importlib.import_module({b!r})
try:
    print("granted", a.{lend}(lambda t: b.{use}(t)))
except BufferError as e:
    print("refused", e)
"""


@pytest.mark.parametrize("a,b", ORDERS)
@pytest.mark.parametrize(
    "lend,use",
    [
        # The lend (`dltensor_from_py_object_no_sync`) of a copy that never joined.
        ("lend_while_writing", "sum_view"),
        # The owned export of its table, for a mutable argument.
        ("lend_while_reading", "add_one_mut"),
        # Its `__dlpack__`.
        ("lend_while_writing", "sum_via_dlpack"),
    ],
)
def test_a_live_borrow_of_one_copy_is_seen_by_the_other(a, b, lend, use):
    out = _run(SCENARIO.format(a=a, b=b, lend=lend, use=use))
    assert out.startswith("refused") and "borrowed" in out, out


@pytest.mark.parametrize("a,b", ORDERS)
def test_without_a_live_borrow_the_other_copy_is_granted(a, b):
    out = _run(
        f"""
        import importlib
        a = importlib.import_module({a!r})
        b = importlib.import_module({b!r})
        t = a.lend_while_writing(lambda t: t)  # the guard is gone when this returns
        print(b.sum_view(t), b.add_one_mut(t), b.sum_via_dlpack(t))
        """
    )
    assert out == "264 4 12", out


@needs_numpy_versioned
@pytest.mark.parametrize("a,b", ORDERS)
def test_numpy_views_of_the_other_copys_rust_numpy_table_meet_only_real_borrows(a, b):
    # The first copy to touch a numpy array publishes its own implementation of rust-numpy's
    # table; the second takes its borrows through that table's functions. A mutable view of
    # the second must be granted when nothing else holds the array (its own borrows must not
    # meet each other), and refused while the first holds a view.
    out = _run(
        f"""
        import importlib
        import numpy as np
        a = importlib.import_module({a!r})
        b = importlib.import_module({b!r})
        x = np.zeros(6, dtype=np.uint8)
        print(a.sum_view(x), b.add_one_mut(x), b.add_one_mut(x), a.add_one_mut(x), end=" ")
        try:
            a.view_while(x, lambda: b.add_one_mut(x))
            print("granted", end=" ")
        except BufferError as e:
            print("refused", end=" ")
        print(b.add_one_mut(x), b.sum_view(x[0, ...]), int(x.sum()))
        """
    )
    assert out == "0 6 6 6 refused 6 4 24", out


@needs_numpy_versioned
def test_a_forged_table_marker_is_not_believed():
    # rust-numpy's own table (published by the test extension's rust-numpy) gives a 0-d array
    # an empty range: the twin's views must keep their borrows in it (their 0-d companion
    # there), even when Python code sets numpy's marker attribute (which says "a table of this
    # crate, answered from the shared registry: views need no borrow in it") to rust-numpy's
    # capsule.
    out = _run(
        """
        import numpy as np
        import dlpack_testext as ext
        import dlpack_twin as twin
        ma = np._core.multiarray
        ext.np_rw_dyn_then_tensor_mut(np.zeros(1, np.float32), np.zeros(1, np.float32))
        ma._DLPACK_RS_REGISTRY_BORROWS = ma._RUST_NUMPY_BORROW_CHECKING_API
        x = np.zeros(8, np.uint8)
        y0 = x.view(np.float32)[0, ...]
        try:
            twin.view_while(x, lambda: ext.np_rw_dyn_then_tensor_mut(y0, np.zeros(1, np.float32)))
            print("granted", x[:4].tolist())
        except TypeError as e:  # rust-numpy's own refusal of its argument
            print("refused", e)
        """
    )
    assert out.startswith("refused") and "already borrowed" in out, out


@pytest.mark.parametrize("version", [0, 1])
def test_a_shared_registry_before_version_2_is_refused(version):
    # No released copy of this crate makes a table of version 0 or 1 (1, never released, lacked
    # the strided functions): one found in the interpreter's state dictionary is refused with
    # SystemError, before it is read as a table of our layout.
    out = _run(
        """
        import ctypes
        api = ctypes.pythonapi
        api.PyInterpreterState_Get.restype = ctypes.c_void_p
        api.PyInterpreterState_GetDict.restype = ctypes.py_object
        api.PyInterpreterState_GetDict.argtypes = [ctypes.c_void_p]
        api.PyCapsule_New.restype = ctypes.py_object
        api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        table = (ctypes.c_uint64 * 1)(VERSION)
        name = ctypes.create_string_buffer(b"dlpack_rs.borrow_registry")
        d = api.PyInterpreterState_GetDict(api.PyInterpreterState_Get())
        d["dlpack_rs.borrow_registry"] = api.PyCapsule_New(ctypes.addressof(table), name, None)
        import numpy as np
        import dlpack_testext as ext
        try:
            ext.import_info(np.zeros(3, np.float32), exchange_api=False)
            print("granted")
        except SystemError as e:
            print("refused", e)
        """.replace("VERSION", str(version))
    )
    assert out.startswith("refused") and f"version {version}, this copy needs 2 or later" in out, out
