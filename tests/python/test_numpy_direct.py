"""numpy arrays read directly from their struct: every import must be the tensor numpy's own
`__dlpack__(max_version=(1, 3))` hands over (`exchange_api=False` takes that route), or the same
exception numpy raises, for every kind of array numpy makes; the direct route must really be taken
(no Python allocation: numpy's export allocates its capsule and managed struct); and the array
stays alive exactly as long as the import."""

import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import NUMPY_VERSIONED, refcount, torch

pytestmark = pytest.mark.skipif(not NUMPY_VERSIONED, reason="needs numpy >= 2.1")


def _arrays():
    base = np.arange(2 * 3 * 4 * 5 * 2 * 3, dtype=np.float64).reshape(2, 3, 4, 5, 2, 3)
    ro = np.arange(6, dtype=np.int32)
    ro.flags.writeable = False
    yield "f32", np.arange(6, dtype=np.float32)
    for dt in ["?", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "c8", "c16",
               np.intc, np.uintc, np.int_, np.uint, np.longlong, np.ulonglong, np.short]:
        yield f"dtype {np.dtype(dt)}", np.zeros(3, dtype=dt)
    yield "0-d", np.array(3.5)
    yield "empty", np.zeros((0, 3), dtype=np.float32)
    yield "empty, strided", np.zeros((4, 0, 3), dtype=np.float32)[::2]
    yield "transposed", np.arange(12.0).reshape(3, 4).T
    yield "negative strides", np.arange(12.0).reshape(3, 4)[::-1, ::-2]
    yield "broadcast", np.broadcast_to(np.arange(3.0), (4, 3))
    yield "6-d (past the inline dimensions)", base
    yield "6-d sliced", base[:, ::2, 1:, ::-1]
    yield "read-only", ro
    yield "a view of a view", np.arange(20.0)[2:][::3]
    yield "Fortran order", np.asfortranarray(np.arange(6.0).reshape(2, 3))
    yield "size 1, odd strides", np.lib.stride_tricks.as_strided(np.zeros(8, "u1"), (1, 1), (3, 5))
    yield "strides not whole elements", np.zeros(12, "u1")[1:].view("u1")[::3].view("u1")
    yield "unaligned float32", np.zeros(17, "u1")[1:].view("f4")
    yield "unaligned strides", np.lib.stride_tricks.as_strided(
        np.zeros(16, "u1")[1:].view("u1"), (3,), (5,)).view("u1")
    yield "misfit strides", np.lib.stride_tricks.as_strided(np.zeros(16, "u1"), (3,), (3,))
    yield "f4 with byte strides", np.lib.stride_tricks.as_strided(
        np.zeros(16, "f4"), (3,), (6,))
    yield "byte-swapped", np.zeros(3, ">f4" if sys.byteorder == "little" else "<f4")
    yield "byte order '|'", np.zeros(3, "|u1")
    yield "explicit native order", np.zeros(3, "=f8")
    yield "longdouble", np.zeros(3, np.longdouble)
    yield "clongdouble", np.zeros(3, np.clongdouble)
    yield "datetime", np.zeros(3, "datetime64[s]")
    yield "timedelta", np.zeros(3, "timedelta64[s]")
    yield "object", np.array([1, "a"], dtype=object)
    yield "bytes", np.zeros(3, "S4")
    yield "str", np.zeros(3, "U2")
    yield "structured", np.zeros(3, [("a", "i4"), ("b", "f4")])
    yield "void", np.zeros(3, "V4")
    yield "from bytes (read-only base)", np.frombuffer(b"abcdefgh", dtype=np.uint8)
    yield "from a memoryview", np.asarray(memoryview(bytearray(8)))
    yield "from_dlpack of numpy", np.from_dlpack(np.arange(4.0))
    # Rust storages are made when their test runs: made at collection, they would stay live
    # through the whole session (conftest.py refuses that).
    yield "from_dlpack of a Rust CPU tensor", \
        lambda: np.from_dlpack(ext.make_device_tensor(8, (1, 0)))
    # Made when its test runs (an iterator left open warns at exit, and a module whose tests
    # are skipped never tears down).
    yield "WRITEBACKIFCOPY", _writeback
    # numpy reports the device of the capsule at the end of the base chain: CUDA host memory.
    yield "from_dlpack of CUDA host memory", \
        lambda: np.from_dlpack(ext.make_device_tensor(8, (3, 0)))[2:]


def _writeback():
    it = np.nditer(np.arange(6.0), op_flags=[["readwrite", "updateifcopy"]], op_dtypes=["f4"],
                   casting="same_kind")
    arr = it.operands[0]
    assert arr.flags.writebackifcopy
    _keep.append(it)
    return arr


_keep = []


def _answer(arr, exchange_api):
    try:
        return ext.import_info(arr, exchange_api=exchange_api)
    except Exception as e:  # the same exception, type and message, on both routes
        return (type(e), str(e))


@pytest.mark.parametrize("name,arr", list(_arrays()), ids=[n for n, _ in _arrays()])
def test_direct_read_is_numpy_dunder_dlpack(name, arr):
    if callable(arr):
        arr = arr()
    try:
        assert _answer(arr, True) == _answer(arr, False)
    finally:
        teardown_module()


def test_matrix_subclass_and_torch_memory_match_too():
    with pytest.warns(PendingDeprecationWarning):
        m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    assert _answer(m, True) == _answer(m, False)
    if torch is not None:
        shared = torch.arange(4.0).numpy()  # numpy memory owned by torch
        assert _answer(shared, True) == _answer(shared, False)


def test_subclass_overriding_dunder_dlpack_is_asked():
    class Refusing(np.ndarray):
        def __dlpack__(self, **kw):
            raise BufferError("refused by the subclass")

    r = np.arange(3.0).view(Refusing)
    with pytest.raises(BufferError, match="refused by the subclass"):
        ext.import_info(r)


def _python_allocations(f, arr):
    f(arr)
    f(arr)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        f(arr)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_the_direct_route_is_taken():
    # numpy's export allocates its managed struct with PyMem_Malloc and a capsule: both traced.
    # The direct route allocates nothing Python traces.
    arr = np.arange(6, dtype=np.float32)
    assert _python_allocations(lambda a: ext.numel(a), arr) == 0
    assert _python_allocations(lambda a: ext.typed_numel(a), arr) == 0
    assert _python_allocations(lambda a: ext.import_info(a, exchange_api=False), arr) > \
        _python_allocations(lambda a: ext.import_info(a, exchange_api=True), arr)


def test_a_typed_argument_views_the_array_without_a_managed_tensor():
    # The argument holds the array once (its own reference); an owned import would hold it
    # twice (the argument's reference and the managed tensor's).
    arr = np.arange(6, dtype=np.float32)
    assert ext.tv_refs_held(arr) == (1, 1, 1)
    assert ext.tv_refs_held(arr.reshape(1, 2, 1, 3, 1)) == (1, 1, 1)  # dimensions on the heap
    n = refcount(arr)
    assert ext.tr_sum(arr) == 15.0
    ext.tm_touch(arr)
    assert arr[0] == 1.0 and refcount(arr) == n
    arr.flags.writeable = False
    with pytest.raises(BufferError, match="exported it READ_ONLY"):
        ext.tm_touch(arr)
    assert arr[0] == 1.0 and refcount(arr) == n


def test_the_array_lives_exactly_as_long_as_the_import():
    arr = np.arange(6, dtype=np.float32)
    n = refcount(arr)
    held = ext.hold_import(arr)
    assert refcount(arr) == n + 1
    held.release()
    assert refcount(arr) == n


def test_an_array_of_rust_memory_is_read_directly():
    # numpy reports another device only for its own from_dlpack capsules' devices: any other
    # capsule at the end of the base chain is a CPU array, read directly.
    arr = np.from_dlpack(ext.make_device_tensor(8, (1, 0)))
    assert _python_allocations(lambda a: ext.numel(a), arr) == 0


def _run(*parts):
    code = "\n".join(textwrap.dedent(p) for p in parts)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


# Prints whether a numpy array imports as its __dlpack__ answers, then the Python memory the
# import allocated (0: the direct route).
_READ_DIRECTLY = """
    import tracemalloc
    a = np.zeros(3, np.float32)
    print(ext.import_info(a) == ext.import_info(a, exchange_api=False))
    ext.numel(a)
    tracemalloc.start()
    ext.numel(a)
    print(tracemalloc.get_traced_memory()[1])
"""


def test_a_replaced_numpy_ndarray_is_not_believed():
    # numpy.ndarray replaced by a subclass that refuses __dlpack__, before the extension looked
    # numpy up: its instances must be asked (the type is not numpy's own), and numpy's own
    # arrays must still be read directly (the type comes from numpy's C API table).
    out = _run("""
        import numpy as np
        real = np.ndarray
        class ndarray(real):
            def __dlpack__(self, **kw):
                raise BufferError("refused by the subclass")
        np.ndarray = ndarray
        import dlpack_testext as ext
        x = real.__new__(ndarray, (3,), dtype=np.float32)
        try:
            ext.import_info(x)
        except BufferError as e:
            print(str(e).replace(" ", "_"))
    """, _READ_DIRECTLY)
    assert out.split() == ["refused_by_the_subclass", "True", "0"]


def test_a_fake_numpy_module_is_not_believed():
    # A module posing as numpy, with an int subclass as its ndarray: an int read as an array
    # struct is a wild read. It must be asked instead.
    out = _run("""
        import sys, types
        fake = types.ModuleType("numpy")
        fake.__version__ = "2.1.0"
        class ndarray(int):
            def __dlpack__(self, **kw):
                raise BufferError("asked")
        fake.ndarray = ndarray
        sys.modules["numpy"] = fake
        import dlpack_testext as ext
        for n in (5, 12 << 30, 1 << 300):
            try:
                ext.import_info(ndarray(n))
            except BufferError as e:
                print(e)
    """)
    assert out.split() == ["asked"] * 3


def test_swapped_numpy_c_api_capsules_are_never_called():
    # numpy's modules publish capsules without a name; Python code can swap them. Nothing of
    # them is followed: numpy's type is recognised as a static type named numpy.ndarray, and
    # what numpy exports is asked of numpy.
    out = _run("""
        import numpy as np
        import numpy._core._multiarray_umath as mu
        mu._ARRAY_API = mu._UFUNC_API
        import dlpack_testext as ext
    """, _READ_DIRECTLY)
    assert out.split() == ["True", "0"]


def test_a_heap_type_named_numpy_ndarray_is_not_believed():
    out = _run("""
        import numpy as np
        class ndarray(int):
            def __dlpack__(self, **kw):
                raise BufferError("asked")
        ndarray.__module__ = "numpy"
        np.ndarray = ndarray
        import dlpack_testext as ext
        try:
            ext.import_info(ndarray(12 << 30))
        except BufferError as e:
            print(e)
    """)
    assert out.split() == ["asked"]


def test_imports_work_with_numpy_blocked():
    out = _run("""
        import sys
        sys.modules["numpy"] = None
        import dlpack_testext as ext
        t = ext.make_device_tensor(8, (1, 0))
        print(ext.import_info(t)["shape"], ext.import_info(t, exchange_api=False)["shape"])
    """)
    assert out.split() == ["[8]", "[8]"]


# A fresh interpreter: numpy's type found (a typed call of a list), rust-numpy's table not looked up
# yet. `t[0]` is held only by the tuple `f(*t)` passes its items from, so numpy's resize (with
# its reference check) is refused only while the argument holds the array. The first garbage
# collection during the call (`gc.callbacks`, as a finalizer would) tries to resize it.
_RESIZE_DURING_EXTRACTION = """
    import gc
    import numpy as np
    import dlpack_testext as ext
    try:
        ext.tr_sum([1.0])
    except Exception:
        pass
    t = (np.zeros(4, np.float32),)
    seen = []
    def resize(phase, info):
        if phase == "start" and not seen:
            try:
                t[0].resize(1 << 20)
                seen.append("resized")
            except ValueError:
                seen.append("refused")
    gc.collect()
    gc.callbacks.append(resize)
    gc.set_threshold(1)
    result = {call}
    gc.set_threshold(700)
    gc.callbacks.remove(resize)
    print(result == t[0].__array_interface__["data"][0], t[0][0], seen)
"""


@pytest.mark.parametrize("call,written", [("ext.dt_info(*t)[4]", 0.0),
                                           ("ext.dtm_target(*t)[1]", 0.0),
                                           ("(ext.tm_touch(*t), t[0].ctypes.data)[1]", 1.0)],
                         ids=["shared", "writable, any device", "writable"])
def test_a_typed_argument_holds_the_array_before_python_code_can_run(call, written):
    # The view is made from the array's struct, then Python code may run before the argument is
    # handed out (here: the first look-up of rust-numpy's table allocates, and a garbage
    # collection runs). numpy must refuse to resize the array under the view (found in review:
    # the view addressed the freed memory, and a writable one wrote there).
    out = _run(_RESIZE_DURING_EXTRACTION.replace("{call}", call))
    same, first, seen = out.strip().split(maxsplit=2)
    assert float(first) == written, out
    if sys.version_info < (3, 12):
        # The collection runs inside the call, on the allocation that crosses the threshold: the
        # resize is refused and the view addressed the array's memory as it still is.
        assert same == "True" and seen == "['refused']", out
    else:
        # CPython 3.12 runs collections only at the evaluation loop's next check (gh-97922),
        # after the call returned and the argument let go of the array: the resize is not
        # refused then (the window this test guards cannot be entered from an allocation).
        assert seen in ("['resized']", "[]"), out


def test_numpy_refuses_to_resize_an_array_a_typed_argument_views():
    # While the argument lives it holds the array: numpy's reference check refuses to reallocate
    # it, even when the caller passes the array from a tuple that alone holds it (`f(*t)`).
    t = (np.zeros(4, np.float32),)
    start = t[0].ctypes.data

    def resize():
        with pytest.raises(ValueError, match="cannot resize"):
            t[0].resize(1 << 20)

    assert ext.tvm_call_then_write(*t, resize) == start == t[0].ctypes.data
    assert t[0].tolist() == [7.0, 0.0, 0.0, 0.0]


def teardown_module():
    while _keep:
        _keep.pop().close()


# A fresh interpreter. An array numpy made from a legacy capsule has a capsule base named
# "numpy_dltensor"; the direct read asks it for "numpy_dltensor_versioned" first (is the array on
# the CPU?). Asked with PyCapsule_GetPointer, the wrong name set a ValueError, which CPython 3.11
# and older create at once while an exception is being handled: an allocation, and with it a
# garbage collection whose callback (as a finalizer would) changes the array's dtype between the
# read of its dtype and the read of its extents (found in review: a float32 view of the four
# bytes as four elements, past the buffer where numpy gives compact arrays NULL strides).
_DTYPE_CHANGED_DURING_THE_READ = """
    import gc
    import numpy as np
    import dlpack_testext as ext

    class Legacy:
        def __init__(self, capsule):
            self.capsule = capsule
        def __dlpack__(self, stream=None):
            return self.capsule
        def __dlpack_device__(self):
            return (1, 0)

    a = np.from_dlpack(Legacy(ext.derived_generic_capsule("float32", [1], versioned=False)))
    assert a.base is not None and a.dtype == np.float32
    ext.dt_info(np.zeros(1, np.float32))  # every one-time look-up done
    seen = []
    def change(phase, info):
        if phase == "start" and not seen:
            a.dtype = np.uint8
            seen.append(a.shape)
    try:
        raise KeyError("being handled")
    except KeyError:
        gc.collect()
        gc.callbacks.append(change)
        gc.set_threshold(1)
        try:
            result = ext.dt_info(a)[1:4]
        except TypeError:
            result = "TypeError"
        gc.set_threshold(700)
        gc.callbacks.remove(change)
    print(result, a.dtype, seen)
"""


def test_a_direct_read_sees_one_dtype_and_its_extents():
    out = _run(_DTYPE_CHANGED_DURING_THE_READ).strip()
    # Either the float32 array as it was (a garbage collection, if any, after the read), or
    # the uint8 array it became (refused: not float32); never float32 over uint8's extents.
    assert out.startswith(("([1], [1], 'float32') ", "TypeError ")), out
