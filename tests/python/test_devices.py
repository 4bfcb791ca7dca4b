"""Device memory without a GPU: synthetic producers whose tensors claim to be on CUDA (2) or
ROCm (10), behind `__dlpack__` and behind a C exchange table, and Rust exports that claim a
device. What is checked: which path an import takes and what it hands on (the producer's
current work stream, for an unsynchronised table import), the stream values passed to
`__dlpack__`, the `stream` / `dl_device` / `copy` rules of an export, and that no host view of
device memory is ever handed out. (The memory itself is host memory: nothing reads it as device
memory; tests/gpu/run.sh does that on a GPU.)
"""

import ctypes
import sys

import numpy as np
import pytest

import dlpack_testext as ext
from dlpack_ctypes import DLDevice, Hostile, _api

CUDA, ROCM = 2, 10

MTPtr = ctypes.c_void_p
FromPy = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
WorkStream = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)
)


class Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class Table(ctypes.Structure):
    _fields_ = [
        ("version", Version),
        ("prev_api", ctypes.c_void_p),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


def device_producer_type(device, stream=0xAB00, with_stream=True):
    """A new producer type whose objects hold a fresh 2x3 float32 tensor on `device`, exported
    through its exchange table and through `__dlpack__` (which records its keyword arguments).
    `current_work_stream` reports `stream` and records its calls (or is NULL)."""
    made = []  # the Hostile tensors handed out
    stream_calls = []

    def fresh():
        h = Hostile()
        h.t.device = DLDevice(*device)
        made.append(h)
        return h

    @FromPy
    def from_py(obj, out):
        out[0] = fresh().address
        return 0

    @WorkStream
    def work_stream(device_type, device_id, out):
        stream_calls.append((device_type, device_id))
        out[0] = stream
        return 0

    table = Table()
    table.version = Version(1, 3)
    table.managed_tensor_from_py_object_no_sync = ctypes.cast(from_py, ctypes.c_void_p)
    if with_stream:
        table.current_work_stream = ctypes.cast(work_stream, ctypes.c_void_p)
    capsule = _api.PyCapsule_New(ctypes.addressof(table), b"dlpack_exchange_api", None)

    class DeviceProducer:
        __dlpack_c_exchange_api__ = capsule
        _keep = (table, from_py, work_stream)

        def __init__(self):
            self.calls = []

        def __dlpack__(self, **kwargs):
            self.calls.append(kwargs)
            return fresh().capsule()

        def __dlpack_device__(self):
            return device

    return DeviceProducer, made, stream_calls


@pytest.mark.parametrize("device", [(CUDA, 0), (CUDA, 1), (ROCM, 0)])
def test_table_import_of_device_tensor_hands_on_the_producers_stream(device):
    cls, made, stream_calls = device_producer_type(device, stream=0xAB00)
    obj = cls()
    (dev, producer_stream, host_view_refused) = ext.import_device(obj, unsynchronized=True)
    assert dev == device
    assert producer_stream == 0xAB00  # unsynchronised: the consumer must order after it
    assert stream_calls == [device]  # asked for the tensor's own device
    assert obj.calls == []  # `__dlpack__` was not needed
    assert host_view_refused  # device memory: no &[T] on the CPU
    assert [h.deleted for h in made] == [1]  # released exactly once


def test_device_tensors_take_dunder_dlpack_by_default():
    # Without `unsynchronized`, a device tensor from the table is released and `__dlpack__`
    # (which synchronises) is asked instead.
    cls, made, stream_calls = device_producer_type((CUDA, 0))
    obj = cls()
    dev, producer_stream, host_view_refused = ext.import_device(obj)
    assert (dev, producer_stream, host_view_refused) == ((CUDA, 0), None, True)
    assert obj.calls == [{"max_version": (1, 3)}]
    assert stream_calls == []
    assert [h.deleted for h in made] == [1, 1]


@pytest.mark.parametrize("device_type", [3, 11, 13])  # CUDA_HOST, ROCM_HOST, CUDA_MANAGED
def test_pinned_and_managed_memory_is_never_viewed_unsynchronised(device_type):
    # The CPU can address these, but queued device work may still write them: the table's
    # unsynchronised tensor is not kept even when asked, and no host view or copy is handed out.
    cls, made, stream_calls = device_producer_type((device_type, 0))
    obj = cls()
    dev, producer_stream, host_view_refused = ext.import_device(obj, unsynchronized=True)
    assert (dev, producer_stream, host_view_refused) == ((device_type, 0), None, True)
    assert obj.calls == [{"max_version": (1, 3)}]
    assert stream_calls == []
    with pytest.raises(BufferError, match="without synchronisation"):
        ext.as_slice_values(cls(), "float32")


def test_table_without_work_stream_falls_back_to_dunder_dlpack():
    cls, made, stream_calls = device_producer_type((CUDA, 0), with_stream=False)
    obj = cls()
    dev, producer_stream, _ = ext.import_device(obj, unsynchronized=True)
    assert dev == (CUDA, 0)
    # The unsynchronised table tensor was released; `__dlpack__` synchronises (on the default
    # stream: no stream was given), so nothing is left to order after.
    assert producer_stream is None
    assert obj.calls == [{"max_version": (1, 3)}]
    assert [h.deleted for h in made] == [1, 1]


@pytest.mark.parametrize("stream", [-1, 1, 2, 0x5000])
def test_consumer_stream_goes_to_dunder_dlpack(stream):
    cls, made, stream_calls = device_producer_type((CUDA, 0))
    obj = cls()
    dev, producer_stream, _ = ext.import_device(obj, stream)
    assert obj.calls == [{"stream": stream, "max_version": (1, 3)}]
    assert stream_calls == []  # the table is not used when a stream is asked for
    assert producer_stream is None
    assert [h.deleted for h in made] == [1]


def test_our_own_device_export_reports_the_default_stream():
    # dlpack_rs.Tensor's table says NULL (the default stream) for every device.
    t = ext.make_device_tensor(8, (CUDA, 0))
    dev, producer_stream, host_view_refused = ext.import_device(t, unsynchronized=True)
    # CU_STREAM_LEGACY by name (1), not NULL, which a per-thread-stream consumer would read as
    # its own per-thread stream.
    assert (dev, producer_stream, host_view_refused) == ((CUDA, 0), 1, True)
    t = ext.make_device_tensor(8, (ROCM, 0))
    assert ext.import_device(t, unsynchronized=True)[1] == 0


# ---------------------------------------------------------------------------------------------
# Export rules for a Rust tensor on a device


@pytest.mark.parametrize("stream", [None, -1, 1, 2, 3, 0x7FFF_0000])
def test_cuda_export_accepts_the_streams_the_spec_allows(stream):
    t = ext.make_device_tensor(8, (CUDA, 0))
    assert t.__dlpack_device__() == (CUDA, 0)
    cap = t.__dlpack__(stream=stream, max_version=(1, 3))
    assert type(cap).__name__ == "PyCapsule"


def test_cuda_export_refuses_stream_0():
    # 0 is ambiguous for CUDA (legacy default or none): disallowed by the spec.
    with pytest.raises(ValueError, match="stream 0"):
        ext.make_device_tensor(8, (CUDA, 0)).__dlpack__(stream=0, max_version=(1, 3))


@pytest.mark.parametrize("stream,ok", [(None, True), (-1, True), (0, True), (1, False), (2, False), (3, True)])
def test_rocm_export_streams(stream, ok):
    t = ext.make_device_tensor(8, (ROCM, 0))
    if ok:
        t.__dlpack__(stream=stream, max_version=(1, 3))
    else:
        with pytest.raises(ValueError):
            t.__dlpack__(stream=stream, max_version=(1, 3))


def test_cpu_export_refuses_any_stream():
    t = ext.make_device_tensor(8, (1, 0))
    with pytest.raises(ValueError, match="stream must be None"):
        t.__dlpack__(stream=1, max_version=(1, 3))


@pytest.mark.parametrize(
    "kwargs",
    [{"dl_device": (1, 0)}, {"copy": True}, {"dl_device": (CUDA, 1)}, {"dl_device": (ROCM, 0)}],
)
def test_device_export_cannot_copy_or_move(kwargs):
    # A Rust tensor on a device cannot be copied to the host (or another device) by this crate.
    t = ext.make_device_tensor(8, (CUDA, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 3), **kwargs)


def test_device_export_to_its_own_device_without_copy():
    t = ext.make_device_tensor(8, (CUDA, 0))
    cap = t.__dlpack__(max_version=(1, 3), dl_device=(CUDA, 0), copy=False)
    assert type(cap).__name__ == "PyCapsule"


def test_numpy_refuses_a_device_tensor():
    # numpy's own refusal: RuntimeError for a non-CPU DLTensor, BufferError from numpy 2.5 on
    # (numpy#31000).
    error = BufferError if np.lib.NumpyVersion(np.__version__) >= "2.5.0" else RuntimeError
    with pytest.raises(error, match="Unsupported device"):
        np.from_dlpack(ext.make_device_tensor(8, (CUDA, 0)))


# ---------------------------------------------------------------------------------------------
# Stream ordering of device exports: what the producer's StreamOrder is asked, per route


@pytest.mark.parametrize(
    "stream,expected",
    [(None, [(CUDA, 0, 1)]), (-1, []), (1, [(CUDA, 0, 1)]), (2, [(CUDA, 0, 2)]), (0x7FFF_0000, [(CUDA, 0, 0x7FFF_0000)])],
)
@pytest.mark.parametrize("make", ["ordered_device_tensor", "ordered_device_tensor_with", "derived_device_tensor"])
def test_cuda_export_orders_the_consumer_stream(make, stream, expected):
    # None is the legacy default stream (1), -1 asks for no synchronisation.
    t, order = getattr(ext, make)(8, (CUDA, 0))
    t.__dlpack__(stream=stream, max_version=(1, 3))
    assert order.calls() == expected


@pytest.mark.parametrize("stream,expected", [(None, [(ROCM, 0, 0)]), (0, [(ROCM, 0, 0)]), (-1, []), (3, [(ROCM, 0, 3)])])
def test_rocm_export_orders_the_consumer_stream(stream, expected):
    # ROCm's default stream is 0.
    t, order = ext.ordered_device_tensor(8, (ROCM, 0))
    t.__dlpack__(stream=stream, max_version=(1, 3))
    assert order.calls() == expected


def test_an_invalid_stream_is_refused_before_any_ordering():
    t, order = ext.ordered_device_tensor(8, (CUDA, 0))
    with pytest.raises(ValueError, match="stream 0"):
        t.__dlpack__(stream=0, max_version=(1, 3))
    assert order.calls() == []


def test_a_failed_ordering_raises_buffer_error_and_exports_nothing():
    t, order = ext.ordered_device_tensor(8, (CUDA, 0), fail=True)
    before = sys.getrefcount(t)
    with pytest.raises(BufferError, match="cuStreamWaitEvent failed"):
        t.__dlpack__(stream=5, max_version=(1, 3))
    assert order.calls() == [(CUDA, 0, 5)]
    assert sys.getrefcount(t) == before  # no keepalive left behind


def test_the_exchange_table_orders_before_the_default_stream_it_reports():
    # Our table's current_work_stream is NULL (the default stream): its no_sync export orders
    # device data before that stream, as __dlpack__(stream=None) does.
    t, order = ext.ordered_device_tensor(8, (CUDA, 0))
    dev, producer_stream, _ = ext.import_device(t, unsynchronized=True)
    assert (dev, producer_stream) == ((CUDA, 0), 1)
    assert order.calls() == [(CUDA, 0, 1)]


def test_the_tables_dltensor_view_orders_before_the_default_stream_too():
    from test_exchange_api import DLTensor, DLTensorFromPy, api_of

    t, order = ext.ordered_device_tensor(8, (CUDA, 0))
    view = DLTensor()
    assert DLTensorFromPy(api_of(t).dltensor_from_py_object_no_sync)(t, ctypes.byref(view)) == 0
    assert order.calls() == [(CUDA, 0, 1)]
    t, order = ext.ordered_device_tensor(8, (CUDA, 0), fail=True)
    with pytest.raises(BufferError, match="cuStreamWaitEvent"):
        DLTensorFromPy(api_of(t).dltensor_from_py_object_no_sync)(t, ctypes.byref(view))


@pytest.mark.parametrize("device_type", [3, 13])  # CUDA_HOST (pinned), CUDA_MANAGED
@pytest.mark.parametrize("kwargs", [{"dl_device": (1, 0)}, {"copy": True}])
def test_no_host_copy_of_pinned_or_managed_exports(device_type, kwargs):
    # Queued device work may still be writing pinned or managed memory: a host copy could read
    # it meanwhile (the same rule as for imports: host copies are of kDLCPU memory only).
    t, order = ext.ordered_device_tensor(8, (device_type, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 3), **kwargs)



def test_a_cpu_export_never_asks_for_ordering():
    t, order = ext.ordered_device_tensor(8, (1, 0))
    np.from_dlpack(t)
    t.__dlpack__(max_version=(1, 3))
    assert order.calls() == []


def test_unsynchronized_import_with_a_stream_still_takes_the_table():
    # With unsynchronized(true) the table is used even when a stream is given; the stream
    # would only go to a producer without a table.
    cls, made, stream_calls = device_producer_type((CUDA, 0))
    obj = cls()
    dev, producer_stream, _ = ext.import_device(obj, 0x5000, True)
    assert obj.calls == []
    assert stream_calls == [(CUDA, 0)]
    assert producer_stream is not None
