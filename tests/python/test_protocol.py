"""The __dlpack__ keyword matrix, version negotiation and capsule ownership rules."""

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import (
    NUMPY_VERSIONED, RecordingProducer, jnp, live, needs, needs_torch, rust_tensor, torch,
)


def capsule_name(cap):
    # The repr is '<capsule object "NAME" at 0x...>'.
    return repr(cap).split('"')[1]


@pytest.mark.parametrize("kind", ["ready", "class"])
@pytest.mark.parametrize(
    "max_version,name",
    [(None, "dltensor"), ((0, 8), "dltensor"), ((1, 0), "dltensor_versioned"),
     ((1, 3), "dltensor_versioned"), ((2, 0), "dltensor_versioned")],
    ids=str,
)
def test_version_matrix_producer(kind, max_version, name, no_leaks):
    t, a = rust_tensor("float32", (3,), kind)
    cap = t.__dlpack__(max_version=max_version)
    assert capsule_name(cap) == name
    info = ext.inspect(cap)
    assert capsule_name(cap) == "used_" + name
    assert info["versioned"] == (name == "dltensor_versioned")
    if info["versioned"]:
        assert info["version"] == (1, 3)
    assert ext.to_bytes(t) == a.tobytes()


@pytest.mark.parametrize("max_version", [None, (0, 8), (1, 0), (1, 3), (2, 0)], ids=str)
def test_version_matrix_numpy_producer(max_version):
    a = np.arange(3.0)
    if not NUMPY_VERSIONED:
        # numpy 2.0's __dlpack__ takes `stream` only and makes legacy capsules.
        with pytest.raises(TypeError):
            a.__dlpack__(max_version=max_version)
        info = ext.inspect(a.__dlpack__())
        assert not info["versioned"] and info["data_ptr"] == a.ctypes.data
        return
    cap = a.__dlpack__(max_version=max_version)
    info = ext.inspect(cap)
    assert info["versioned"] == (max_version is not None and max_version[0] >= 1)
    assert info["data_ptr"] == a.ctypes.data


def test_what_numpy_asks_a_producer_for(no_leaks):
    # README, Compatibility: numpy 2.x (2.1 and newer) asks `max_version=(1, 0)` and gets our
    # versioned capsule (1.3, which a 1.0 consumer reads); numpy 2.0, the last for Python 3.9,
    # asks with no keyword at all and gets a legacy one.
    t, expected = rust_tensor("float32", (2, 3))
    p = RecordingProducer(t)
    a = np.from_dlpack(p)
    np.testing.assert_array_equal(a, expected)
    assert a.ctypes.data == ext.inspect(t)["data_ptr"]
    if NUMPY_VERSIONED:
        assert p.calls == [{"dl_device": None, "copy": None, "max_version": (1, 0)}]
        assert p.capsules == ["dltensor_versioned"]
        assert a.flags.writeable
    else:
        assert p.calls == [{}]
        assert p.capsules == ["dltensor"]
        assert not a.flags.writeable  # a legacy capsule cannot say it is writable


class RaisingIndex:
    """An int-like item whose `__index__` raises: its exception is what the caller gets, except
    TypeError (not an int: "a tuple of two ints") and OverflowError ("out of range")."""

    def __init__(self, exc):
        self.exc = exc

    def __index__(self):
        raise self.exc("from __index__")

    def __repr__(self):
        return f"RaisingIndex({self.exc.__name__})"


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        (dict(max_version=(1,)), TypeError),
        (dict(max_version=[1, 0]), TypeError),
        (dict(max_version="1.0"), TypeError),
        (dict(max_version=(1, "0")), TypeError),
        # The exact-int fast path gives way to the general one for these:
        (dict(max_version=(True, 3)), TypeError),
        (dict(max_version=(1, 2**70)), ValueError),
        (dict(max_version=(1, 2**64 - 1)), ValueError),
        (dict(dl_device=(-(2**80), 0)), ValueError),
        (dict(max_version=(1, 0.5)), TypeError),
        (dict(max_version=(1, RaisingIndex(RuntimeError))), RuntimeError),
        (dict(dl_device=(RaisingIndex(KeyError), 0)), KeyError),
        (dict(max_version=(1, RaisingIndex(TypeError))), TypeError),
        (dict(max_version=(1, RaisingIndex(OverflowError))), ValueError),
        # Not an int decides before out of range, whichever item it is.
        (dict(max_version=(2**70, "x")), TypeError),
        (dict(max_version=("x", 2**70)), TypeError),
        (dict(max_version=(-1, "0")), TypeError),
        (dict(max_version=(1, -1)), ValueError),
        (dict(max_version=(-1, 0)), ValueError),
        (dict(dl_device=(1, 2**40)), ValueError),
        (dict(max_version=(1, 3, 0)), TypeError),
        (dict(dl_device=5), TypeError),
        (dict(dl_device=(1,)), TypeError),
        (dict(dl_device=(2, 0)), BufferError),
        (dict(dl_device=(1, 1)), BufferError),
        (dict(copy="yes"), ValueError),
        (dict(copy=1), ValueError),
        (dict(stream=1), ValueError),
        (dict(stream=0), ValueError),
        (dict(stream="s"), TypeError),
    ],
    ids=str,
)
def test_kwargs_errors(kwargs, exc, no_leaks):
    t, _ = rust_tensor("float32", (3,))
    with pytest.raises(exc):
        t.__dlpack__(**kwargs)


def test_an_index_that_raises_gives_its_own_exception_unless_it_says_not_an_int():
    t, _ = rust_tensor("float32", (3,))
    with pytest.raises(RuntimeError, match="from __index__"):
        t.__dlpack__(max_version=(1, RaisingIndex(RuntimeError)))
    with pytest.raises(TypeError, match="tuple of two ints"):
        t.__dlpack__(max_version=(1, RaisingIndex(TypeError)))
    with pytest.raises(ValueError, match="out of range"):
        t.__dlpack__(max_version=(1, RaisingIndex(OverflowError)))


@pytest.mark.parametrize("make", ["derived", "tensor"])
def test_max_version_of_int_subclasses_and_tuple_subclasses(make):
    # Not exact ints or tuples: read by the general path, with the same answer.
    import collections

    class Int(int):
        pass

    Pair = collections.namedtuple("Pair", "major minor")
    t = ext.derived_vector([1.0]) if make == "derived" else rust_tensor("float32", (3,))[0]
    for mv in [(Int(1), Int(3)), Pair(1, 3), (1, np.int64(3))]:
        assert ext.inspect(t.__dlpack__(max_version=mv))["versioned"]
    assert not ext.inspect(t.__dlpack__(max_version=(Int(0), 5)))["versioned"]


def test_positional_arguments_rejected():
    t, _ = rust_tensor("float32", (3,))
    with pytest.raises(TypeError):
        t.__dlpack__(None)


def test_dl_device_cpu_accepted_and_copy_false():
    t, _ = rust_tensor("int8", (3,))
    cap = t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False)
    info = ext.inspect(cap)
    assert not info["copied"]
    assert info["data_ptr"] == ext.inspect(t)["data_ptr"]


def test_copy_true_sets_is_copied_only_when_versioned(no_leaks):
    t, a = rust_tensor("float64", (2, 2))
    v = ext.inspect(t.__dlpack__(max_version=(1, 3), copy=True))
    assert v["copied"] and v["flags"] & 2
    assert v["data_ptr"] != ext.inspect(t)["data_ptr"]
    legacy = ext.inspect(t.__dlpack__(copy=True))
    assert not legacy["versioned"]
    assert legacy["data_ptr"] != ext.inspect(t)["data_ptr"]  # still a copy


@pytest.mark.parametrize("stream,ok", [(None, True), (-1, True), (1, True), (2, True),
                                        (12345, True), (0, False)])
def test_stream_on_cuda_data(stream, ok):
    # Host memory labelled as CUDA: only __dlpack__ is called, nothing is dereferenced.
    t = ext.RustTensor(bytes(12), "float32", [3], device=(2, 0))
    assert t.__dlpack_device__() == (2, 0)
    if ok:
        cap = t.__dlpack__(stream=stream, max_version=(1, 0))
        assert capsule_name(cap) == "dltensor_versioned"
    else:
        with pytest.raises(ValueError):
            t.__dlpack__(stream=stream)


@pytest.mark.parametrize("stream,ok", [(None, True), (0, True), (-1, True), (7, True),
                                        (1, False), (2, False)])
def test_stream_on_rocm_data(stream, ok):
    t = ext.RustTensor(bytes(12), "float32", [3], device=(10, 0))
    if ok:
        t.__dlpack__(stream=stream)
    else:
        with pytest.raises(ValueError):
            t.__dlpack__(stream=stream)


def test_device_data_cannot_be_copied_to_cpu():
    t = ext.RustTensor(bytes(12), "float32", [3], device=(2, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(1, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(copy=True, max_version=(1, 0))


class LegacyOnly:
    """A producer from before DLPack 1.0: __dlpack__ only takes `stream`."""

    def __init__(self, a):
        self.a = a
        self.calls = []

    def __dlpack__(self, stream=None):
        self.calls.append(stream)
        return self.a.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_legacy_only_producer():
    a = np.arange(5, dtype=np.int32)
    p = LegacyOnly(a)
    info = ext.inspect(p)
    assert not info["versioned"]
    assert p.calls == [None]
    assert ext.to_bytes(LegacyOnly(a)) == a.tobytes()


class Raising:
    """A producer that raises something other than TypeError: no fallback."""

    def __init__(self):
        self.calls = 0

    def __dlpack__(self, **kwargs):
        self.calls += 1
        raise BufferError("cannot export")


def test_no_fallback_on_other_errors():
    p = Raising()
    with pytest.raises(BufferError):
        ext.inspect(p)
    assert p.calls == 1


@needs_torch
def test_capsule_consumed_twice():
    a = np.arange(3.0)
    cap = a.__dlpack__(max_version=(1, 0))
    ext.inspect(cap)
    with pytest.raises(ValueError, match="already consumed"):
        ext.inspect(cap)
    t, _ = rust_tensor("float32", (2,))
    cap = t.__dlpack__()
    torch.from_dlpack(cap)
    with pytest.raises(ValueError):
        ext.inspect(cap)


def test_not_a_dlpack_object():
    with pytest.raises(TypeError):
        ext.inspect(42)
    with pytest.raises(TypeError):
        ext.inspect([1, 2, 3])


@pytest.mark.parametrize("major", [0, 2, 99])
def test_unknown_major_calls_deleter(major, no_leaks):
    before = live()
    cap = ext.make_capsule_with_version(major, 0)
    assert live() == before + 1
    with pytest.raises(BufferError):
        ext.inspect(cap)
    assert live() == before  # the deleter ran, nothing else was touched


@pytest.mark.parametrize("minor", [0, 1, 3, 7])
def test_any_1x_minor_accepted(minor, no_leaks):
    cap = ext.make_capsule_with_version(1, minor)
    assert ext.inspect(cap)["version"] == (1, minor)


@needs("torch", "jax")
def test_numpy_torch_jax_accept_our_tensor_repeatedly(no_leaks):
    t, a = rust_tensor("int32", (4,), "class")
    results = [np.from_dlpack(t), torch.from_dlpack(t), jnp.from_dlpack(t), np.from_dlpack(t)]
    for r in results:
        assert np.asarray(r).tolist() == a.tolist()


@pytest.mark.parametrize("versioned", [True, False])
def test_pending_exception_survives_capsule_destructor(versioned, no_leaks):
    # An unconsumed capsule of ours dies while an exception is set (the destructor runs inside
    # the call, with the error indicator set): the exception must come out unchanged. (A Python
    # `raise` would not do: the traceback keeps the capsule alive until after `except`.)
    assert ext.drop_capsule_with_exception_set(False, versioned) == (
        "ValueError",
        "pending from Rust",
    )


def test_legacy_only_producer_copy_is_made_by_the_consumer():
    a = np.arange(6, dtype=np.int16).reshape(2, 3).T
    p = LegacyOnly(a)
    info = ext.inspect_with(p, copy=True)
    assert p.calls == [None]
    assert info["copied"]
    assert info["data_ptr"] != a.ctypes.data
    assert info["bytes"] == np.ascontiguousarray(a).tobytes()
    with pytest.raises(BufferError):
        ext.inspect_with(LegacyOnly(a), dl_device=(2, 0))


def test_copy_too_large_to_allocate_raises_memory_error():
    # A broadcast layout (stride 0) over one element can describe 2**50 elements; a copy of
    # it cannot be allocated and must raise MemoryError, not abort the process. Run in a
    # child so that an abort fails this test instead of killing the suite.
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import dlpack_testext as ext

        class LegacyOnly:
            def __init__(self, a):
                self.a = a

            def __dlpack__(self, stream=None):
                return self.a.__dlpack__(stream=stream)

            def __dlpack_device__(self):
                return self.a.__dlpack_device__()

        t = ext.make_tensor(b"\\0" * 4, "float32", [2**50], strides=[0])
        for call in (
            lambda: t.__dlpack__(max_version=(1, 3), copy=True),  # producer-side copy
            lambda: ext.inspect_with(LegacyOnly(t), copy=True),  # consumer-side copy
        ):
            try:
                call()
            except MemoryError:
                pass
            else:
                raise SystemExit("no MemoryError")
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])
