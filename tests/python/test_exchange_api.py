"""The DLPack 1.3 C exchange API (`type(x).__dlpack_c_exchange_api__`).

Consumer: `PyTensor` imports through a producer's table (torch's, ours, test tables), walks
`prev_api` for a 1.x table, propagates errors, and falls back to `__dlpack__` (numpy).
Producer: `dlpack_rs.Tensor` and derived classes publish a table; a ctypes consumer written
against dlpack.h's contract drives every function of it.
"""

import ctypes
import gc
import sys

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import NUMPY_VERSIONED, collect, live, needs_torch, refcount, rust_tensor, torch

# ----------------------------------------------------------------------------------------------
# ctypes mirror of dlpack.h (1.3)
# ----------------------------------------------------------------------------------------------


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


# Deleters may run without the GIL: CFUNCTYPE releases it around the call.
Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", Deleter),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]

MTPtr = ctypes.POINTER(DLManagedTensorVersioned)
SetError = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
# The allocator does not need the GIL; the others are called with it held (PYFUNCTYPE keeps
# it and raises the Python exception the function set when it returns -1).
Allocator = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(MTPtr), ctypes.c_void_p, SetError
)
FromPy = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(MTPtr))
ToPy = ctypes.PYFUNCTYPE(ctypes.c_int, MTPtr, ctypes.POINTER(ctypes.c_void_p))
DLTensorFromPy = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))
WorkStream = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)
)


class DLPackExchangeAPIHeader(ctypes.Structure):
    pass


DLPackExchangeAPIHeader._fields_ = [
    ("version", DLPackVersion),
    ("prev_api", ctypes.POINTER(DLPackExchangeAPIHeader)),
]


class DLPackExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


# A private handle: `ctypes.pythonapi`'s function objects (and their argtypes) are shared.
_get_pointer = ctypes.PyDLL(None).PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def api_of(obj):
    """The exchange table of `type(obj)`, read as the header says: from the type, by name."""
    capsule = type(obj).__dlpack_c_exchange_api__
    address = _get_pointer(capsule, b"dlpack_exchange_api")
    return DLPackExchangeAPI.from_address(address)


def export(api, obj):
    """managed_tensor_from_py_object_no_sync(obj) -> owned DLManagedTensorVersioned*."""
    out = MTPtr()
    rc = FromPy(api.managed_tensor_from_py_object_no_sync)(obj, ctypes.byref(out))
    assert rc == 0 and out
    return out


def delete(mt):
    mt.contents.deleter(mt)


def shape_of(t):
    return [t.shape[i] for i in range(t.ndim)]


def strides_of(t):
    return [t.strides[i] for i in range(t.ndim)]


# ----------------------------------------------------------------------------------------------
# Consumer: PyTensor through producers' tables
# ----------------------------------------------------------------------------------------------


@needs_torch
def test_torch_publishes_a_table():
    api = api_of(torch.zeros(1))
    assert api.header.version.major == 1
    assert api.managed_tensor_from_py_object_no_sync


@needs_torch
def test_torch_import_through_exchange_api_shares_memory():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    fast = ext.import_info(t)
    slow = ext.import_info(t, exchange_api=False)
    assert fast["data_ptr"] == t.data_ptr() == slow["data_ptr"]
    assert fast["shape"] == [3, 4]
    assert fast["versioned"] and fast["version"][0] == 1
    assert fast["device"] == (1, 0)


@needs_torch
def test_torch_import_writes_are_shared():
    t = torch.zeros(4, dtype=torch.uint8)
    ext.add_one(t)
    assert t.tolist() == [1, 1, 1, 1]


@needs_torch
def test_torch_read_only_wrapper_is_read_only_through_its_table():
    from torch.utils.dlpack import ReadOnlyTensorWrapper

    t = torch.arange(3, dtype=torch.float32)
    info = ext.import_info(ReadOnlyTensorWrapper(t))
    assert info["read_only"]
    assert info["data_ptr"] == t.data_ptr()


def _storage_use_count(t):
    # References to the tensor's implementation: torch's exports hold one each.
    return t._use_count()


@needs_torch
def test_torch_deleter_called_once_per_import():
    t = torch.arange(5, dtype=torch.float32)
    base = _storage_use_count(t)
    holds = [ext.hold_import(t) for _ in range(3)]
    assert _storage_use_count(t) == base + 3
    for h in holds:
        h.release()
    assert _storage_use_count(t) == base


@needs_torch
def test_torch_import_keeps_data_after_tensor_deleted():
    t = torch.arange(4, dtype=torch.int64) * 3
    h = ext.hold(t)
    del t
    gc.collect()
    assert np.frombuffer(h.to_bytes(), dtype=np.int64).tolist() == [0, 3, 6, 9]
    h.release()


@needs_torch
def test_torch_error_propagates_as_python_exception():
    # A sparse tensor cannot be exported: torch's table raises RuntimeError, its __dlpack__
    # BufferError; through either route the caller gets the protocol's BufferError, the
    # table's error kept as the cause (one line, no C++ backtrace).
    t = torch.zeros(2).to_sparse()
    with pytest.raises(BufferError, match="storage") as info:
        ext.import_info(t)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "\n" not in str(info.value)
    with pytest.raises(BufferError):
        ext.import_info(t, exchange_api=False)
    # The interpreter is fine afterwards.
    assert ext.import_info(torch.zeros(1))["shape"] == [1]


def test_numpy_has_no_table_and_imports_as_its_dunder_dlpack_answers():
    a = np.arange(6, dtype=np.float32)
    assert not hasattr(type(a), "__dlpack_c_exchange_api__")
    info = ext.import_info(a)
    assert info["data_ptr"] == a.ctypes.data
    if NUMPY_VERSIONED:
        assert info["version"] == (1, 0)  # numpy's own answer to max_version=(1, 3)
    else:
        assert not info["versioned"]  # numpy 2.0 only makes legacy capsules


def test_probe_uses_table_not_dunder_dlpack(no_leaks):
    c0, p0, _ = ext.probe_counters()
    p = ext.Probe([1.0, 2.0, 3.0])
    info = ext.import_info(p)
    assert info["data_ptr"] == p.data_ptr() and info["shape"] == [3]
    assert info["version"] == (1, 3)
    c1, p1, _ = ext.probe_counters()
    assert (c1 - c0, p1 - p0) == (1, 0)
    ext.import_info(p, exchange_api=False)
    c2, p2, _ = ext.probe_counters()
    assert (c2 - c1, p2 - p1) == (0, 1)


def test_probe_keepalive_released_by_deleter():
    p = ext.Probe([1.0])
    h = ext.hold_import(p)
    _, _, drops = ext.probe_counters()
    del p
    gc.collect()
    assert ext.probe_counters()[2] == drops  # the import keeps it alive
    h.release()
    assert ext.probe_counters()[2] == drops + 1


def test_options_that_need_dunder_dlpack_bypass_the_table():
    p = ext.Probe([1.0, 2.0])
    c0, p0, _ = ext.probe_counters()
    info = ext.inspect_with(p, copy=True)
    assert info["data_ptr"] != p.data_ptr()
    c1, p1, _ = ext.probe_counters()
    assert (c1 - c0, p1 - p0) == (0, 1)


def test_newer_major_walks_prev_api():
    class Chained(ext.Probe):
        __dlpack_c_exchange_api__ = ext.probe_api("v2_chain")

    c0, p0, _ = ext.probe_counters()
    info = ext.import_info(Chained([4.0, 5.0]))
    assert info["shape"] == [2]
    c1, p1, _ = ext.probe_counters()
    # The 2.0 table would fail; the counting 1.3 table it links to was used.
    assert (c1 - c0, p1 - p0) == (1, 0)


def test_newer_major_without_older_table_falls_back():
    class Newer(ext.Probe):
        __dlpack_c_exchange_api__ = ext.probe_api("v2_only")

    c0, p0, _ = ext.probe_counters()
    assert ext.import_info(Newer([1.0]))["shape"] == [1]
    c1, p1, _ = ext.probe_counters()
    assert (c1 - c0, p1 - p0) == (0, 1)


def test_producer_exception_propagates():
    class Failing(ext.Probe):
        __dlpack_c_exchange_api__ = ext.probe_api("failing")

    with pytest.raises(ValueError, match="export refused"):
        ext.import_info(Failing([1.0]))


def test_failure_without_exception_is_a_system_error():
    class Silent(ext.Probe):
        __dlpack_c_exchange_api__ = ext.probe_api("silent")

    with pytest.raises(SystemError, match="without setting an exception"):
        ext.import_info(Silent([1.0]))


def test_wrong_capsule_name_falls_back():
    class Odd(ext.Probe):
        __dlpack_c_exchange_api__ = ext.make_capsule(b"\0" * 4, "float32", [1], versioned=True)

    c0, p0, _ = ext.probe_counters()
    assert ext.import_info(Odd([1.0]))["shape"] == [1]
    c1, p1, _ = ext.probe_counters()
    assert (c1 - c0, p1 - p0) == (0, 1)


def test_many_types_through_the_cache():
    # More types than cache slots: each still imports through its own table.
    classes = [type(f"P{i}", (ext.Probe,), {}) for i in range(20)]
    c0, p0, _ = ext.probe_counters()
    for _ in range(2):
        for cls in classes:
            assert ext.import_info(cls([1.0]))["shape"] == [1]
    c1, p1, _ = ext.probe_counters()
    assert (c1 - c0, p1 - p0) == (40, 0)


def test_cache_entries_follow_their_types_through_eviction_and_address_reuse():
    # Types with a table and types without, more of them than cache slots, freed and made anew
    # (new types may take freed addresses): every import takes its own type's path, so no entry
    # of the cache (or of its lock-free copy) answers for another type.
    c0, p0, _ = ext.probe_counters()
    tables = dunders = 0
    for r in range(4):
        with_table = [type(f"T{r}_{i}", (ext.Probe,), {}) for i in range(6)]
        without = [
            type(f"N{r}_{i}", (ext.Probe,), {"__dlpack_c_exchange_api__": None}) for i in range(6)
        ]
        for _ in range(2):
            for a, b in zip(with_table, without):
                assert ext.import_info(a([1.0]))["shape"] == [1]
                assert ext.import_info(b([1.0, 2.0]))["shape"] == [2]
                tables, dunders = tables + 1, dunders + 1
        del with_table, without, a, b
        gc.collect()
    c1, p1, _ = ext.probe_counters()
    assert (c1 - c0, p1 - p0) == (tables, dunders)


# ----------------------------------------------------------------------------------------------
# Producer: our tables, driven by a ctypes consumer
# ----------------------------------------------------------------------------------------------


@pytest.fixture(params=["tensor", "derived"])
def producer(request):
    if request.param == "tensor":
        t, a = rust_tensor("float32", (2, 3))
        return t, a.reshape(-1).tolist(), [2, 3]
    values = [1.5, 2.5, 3.5]
    return ext.derived_vector(values), values, [3]


def test_table_header(producer):
    obj, _, _ = producer
    api = api_of(obj)
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    assert not api.header.prev_api
    assert api.managed_tensor_allocator
    assert api.managed_tensor_from_py_object_no_sync
    assert api.managed_tensor_to_py_object_no_sync
    assert api.current_work_stream


def test_ctypes_consumer_from_py_object(producer, no_leaks):
    obj, values, shape = producer
    api = api_of(obj)
    before = refcount(obj)
    mt = export(api, obj)
    m = mt.contents
    assert (m.version.major, m.version.minor) == (1, 3)
    assert m.flags == 0
    t = m.dl_tensor
    assert (t.device.device_type, t.device.device_id) == (1, 0)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1)
    assert shape_of(t) == shape
    assert strides_of(t) == ([3, 1] if shape == [2, 3] else [1])
    assert t.byte_offset == 0
    got = (ctypes.c_float * len(values)).from_address(t.data)
    assert list(got) == values
    assert refcount(obj) == before + 1  # the export keeps the object alive
    delete(mt)  # without the GIL (CFUNCTYPE)
    assert refcount(obj) == before


def test_ctypes_consumer_read_only_derived():
    obj = ext.derived_read_only(4)
    mt = export(api_of(obj), obj)
    assert mt.contents.flags & 1  # READ_ONLY
    delete(mt)


def test_from_py_object_wrong_type_raises_type_error():
    api = api_of(ext.derived_vector([1.0]))
    out = MTPtr()
    with pytest.raises(TypeError):
        FromPy(api.managed_tensor_from_py_object_no_sync)(np.zeros(1), ctypes.byref(out))
    assert not out


def test_to_py_object_wraps_in_dlpack_tensor(producer, no_leaks):
    obj, values, shape = producer
    api = api_of(obj)
    mt = export(api, obj)
    out = ctypes.c_void_p()
    rc = ToPy(api.managed_tensor_to_py_object_no_sync)(mt, ctypes.byref(out))
    assert rc == 0 and out.value
    wrapped = ctypes.cast(out.value, ctypes.py_object).value
    ctypes.pythonapi.Py_DecRef(ctypes.py_object(wrapped))  # steal the returned reference
    assert ext.is_dlpack_tensor(wrapped)
    assert wrapped.shape == shape
    assert np.from_dlpack(wrapped).reshape(-1).tolist() == values
    del wrapped


def test_round_trip_through_rust_consumer(producer):
    obj, values, shape = producer
    r = ext.table_round_trip(obj)
    assert ext.is_dlpack_tensor(r)
    assert np.from_dlpack(r).reshape(-1).tolist() == values


def test_dltensor_view_of_dlpack_tensor(no_leaks):
    t, a = rust_tensor("float32", (2, 3))
    api = api_of(t)
    assert api.dltensor_from_py_object_no_sync
    view = DLTensor()
    rc = DLTensorFromPy(api.dltensor_from_py_object_no_sync)(t, ctypes.byref(view))
    assert rc == 0
    assert shape_of(view) == [2, 3] and strides_of(view) == [3, 1]
    assert view.data == ext.inspect(t)["data_ptr"]


def test_dltensor_view_refuses_read_only():
    t, _ = rust_tensor("float32", (2,), read_only=True)
    view = DLTensor()
    with pytest.raises(BufferError):
        DLTensorFromPy(api_of(t).dltensor_from_py_object_no_sync)(t, ctypes.byref(view))


def test_derived_has_no_dltensor_view():
    assert not api_of(ext.derived_vector([1.0])).dltensor_from_py_object_no_sync


def test_current_work_stream_is_null_for_cpu():
    api = api_of(ext.derived_vector([1.0]))
    stream = ctypes.c_void_p(1234)
    assert WorkStream(api.current_work_stream)(1, 0, ctypes.byref(stream)) == 0
    assert stream.value is None


def test_allocator_makes_zeroed_cpu_tensor():
    api = api_of(ext.derived_vector([1.0]))
    shape = (ctypes.c_int64 * 2)(3, 5)
    proto = DLTensor(None, DLDevice(1, 0), 2, DLDataType(2, 64, 1), shape, None, 0)
    out = MTPtr()
    errors = []
    set_error = SetError(lambda ctx, kind, msg: errors.append((kind, msg)))
    rc = Allocator(api.managed_tensor_allocator)(
        ctypes.byref(proto), ctypes.byref(out), None, set_error
    )
    assert rc == 0 and not errors
    t = out.contents.dl_tensor
    assert shape_of(t) == [3, 5] and strides_of(t) == [5, 1]
    assert t.data % 64 == 0
    assert list((ctypes.c_double * 15).from_address(t.data)) == [0.0] * 15
    # Consumers may write to it, and hand it to Python.
    (ctypes.c_double * 15).from_address(t.data)[7] = 42.0
    obj = ctypes.c_void_p()
    assert ToPy(api.managed_tensor_to_py_object_no_sync)(out, ctypes.byref(obj)) == 0
    wrapped = ctypes.cast(obj.value, ctypes.py_object).value
    ctypes.pythonapi.Py_DecRef(ctypes.py_object(wrapped))
    assert np.from_dlpack(wrapped)[1, 2] == 42.0


def test_allocator_reports_errors_through_set_error():
    api = api_of(ext.derived_vector([1.0]))
    shape = (ctypes.c_int64 * 1)(4)
    errors = []
    set_error = SetError(lambda ctx, kind, msg: errors.append((kind, msg)))
    out = MTPtr()
    cuda = DLTensor(None, DLDevice(2, 0), 1, DLDataType(2, 32, 1), shape, None, 0)
    rc = Allocator(api.managed_tensor_allocator)(
        ctypes.byref(cuda), ctypes.byref(out), None, set_error
    )
    assert rc == -1 and not out
    assert errors[-1][0] == b"BufferError"
    negative = (ctypes.c_int64 * 1)(-1)
    bad = DLTensor(None, DLDevice(1, 0), 1, DLDataType(2, 32, 1), negative, None, 0)
    rc = Allocator(api.managed_tensor_allocator)(
        ctypes.byref(bad), ctypes.byref(out), None, set_error
    )
    assert rc == -1 and errors[-1][0] == b"ValueError"


def test_pytensor_imports_our_classes_through_the_table(no_leaks):
    t, a = rust_tensor("float32", (2, 3))
    assert ext.import_info(t)["data_ptr"] == ext.inspect(t)["data_ptr"]
    d = ext.derived_vector([1.0, 2.0])
    assert ext.as_slice_values(d, "float32") == [1.0, 2.0]


@needs_torch
def test_torch_from_dlpack_still_works_on_our_classes(producer):
    # torch.from_dlpack uses __dlpack__ (it does not consume other types' tables).
    obj, values, shape = producer
    assert torch.from_dlpack(obj).reshape(-1).tolist() == values


def test_no_leak_after_many_exchange_exports(no_leaks):
    before = live()
    t, _ = rust_tensor("int32", (4,))
    api = api_of(t)
    start = sys.getrefcount(t)
    for _ in range(100):
        delete(export(api, t))
    assert sys.getrefcount(t) == start  # each export's reference was released by its deleter
    assert live() == before + 1  # only `t` itself
    del t
    collect()
    assert live() == before


@needs_torch
def test_torch_conjugate_view_is_not_imported_unconjugated():
    """torch's exchange table exports a conjugate-bit view without resolving it (its
    `__dlpack__` refuses it); the importer must not hand out the unconjugated values."""
    base = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    view = base.conj()
    assert view.is_conj()
    with pytest.raises(BufferError, match="conjugate"):
        ext.import_info(view)
    # Resolved, the values are the conjugates; a plain complex tensor still imports zero-copy.
    resolved = view.resolve_conj()
    assert np.frombuffer(ext.to_bytes(resolved), dtype=np.complex64).tolist() == [1 - 2j, 3 + 4j]
    assert ext.import_info(base)["data_ptr"] == base.data_ptr()


# ---------------------------------------------------------------------------------------------
# Returned<Framework>: handing a Rust tensor to torch through torch's own table


@needs_torch
def test_returned_gives_torch_the_rust_memory(no_leaks):
    payload = np.arange(5, dtype=np.float32).tobytes()
    before = live()
    x, ptr = ext.hand_to(torch.Tensor, payload)
    assert type(x) is torch.Tensor
    assert x.data_ptr() == ptr  # zero-copy
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    x[0] = 7.0  # torch owns it now and may write
    assert x[0].item() == 7.0
    assert live() == before + 1
    del x
    collect()
    assert live() == before  # torch called the deleter: the Rust storage is gone


def test_returned_falls_back_to_from_dlpack_then_to_a_dlpack_rs_tensor(no_leaks):
    # numpy's type has no exchange table: numpy.from_dlpack is called with a dlpack_rs.Tensor.
    payload = np.arange(3, dtype=np.float32).tobytes()
    a, ptr = ext.hand_to(np.ndarray, payload)
    assert type(a) is np.ndarray and a.ctypes.data == ptr
    assert a.tolist() == [0.0, 1.0, 2.0]
    # A type that is no framework we know and has no table: the producer object itself.

    class Unknown:
        pass

    t, ptr = ext.hand_to(Unknown, payload)
    assert type(t).__name__ == "Tensor" and type(t).__module__ == "dlpack_rs"
    assert np.from_dlpack(t).ctypes.data == ptr
    # Read-only data goes out the same way, and stays read-only: no table or from_dlpack that
    # might ignore the flag is involved.
    t, ptr = ext.hand_to(Unknown, payload, True)
    assert type(t).__name__ == "Tensor" and t.read_only
    if NUMPY_VERSIONED:
        a = np.from_dlpack(t)
        assert a.ctypes.data == ptr and not a.flags.writeable


@needs_torch
def test_returned_refuses_read_only_tensors(no_leaks):
    # torch's table ignores READ_ONLY: handing read-only memory over would let torch write it.
    before = live()
    with pytest.raises(BufferError, match="read-only"):
        ext.hand_to(torch.Tensor, bytes(8), True)
    collect()
    assert live() == before  # the refused tensor was released
