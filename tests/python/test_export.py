"""Rust -> peer: tensors owned by Rust, consumed by numpy, torch, jax, pyarrow, array-api-strict."""

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import (
    JAX_DTYPES, NUMPY_DTYPES, NUMPY_VERSIONED, PYARROW_DTYPES, SHAPES, TORCH_DTYPES,
    DlpackOnlyProducer, RecordingProducer, collect, jnp, live, needs, needs_array_api_strict,
    needs_jax, needs_numpy_versioned, needs_pyarrow, needs_torch, pa, rust_tensor, sample, torch,
    xp,
)


def torch_to_numpy(t, dtype):
    if dtype == "bfloat16":
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def jax_to_numpy(j, dtype):
    a = np.asarray(j)
    if dtype == "bfloat16":
        return a.view(np.uint16)
    return a


@pytest.mark.parametrize("kind", ["ready", "class"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_from_rust(dtype, shape, kind, no_leaks):
    t, expected = rust_tensor(dtype, shape, kind)
    # A Rust bool buffer is exported read-only, which the legacy capsule numpy 2.0 asks for
    # cannot say: numpy 2.0 gets a copy.
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(dtype)
    assert a.shape == shape
    np.testing.assert_array_equal(a, expected)


@needs_torch
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_torch_from_rust(dtype, shape, no_leaks):
    t, expected = rust_tensor(dtype, shape)
    x = torch.from_dlpack(t)
    assert str(x.dtype) == f"torch.{dtype}"
    assert tuple(x.shape) == shape
    np.testing.assert_array_equal(torch_to_numpy(x, dtype), expected)


@needs_jax
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_jax_from_rust(dtype, shape, no_leaks):
    t, expected = rust_tensor(dtype, shape, "class")
    j = jnp.from_dlpack(t)
    assert j.dtype.name == dtype
    assert j.shape == shape
    np.testing.assert_array_equal(jax_to_numpy(j, dtype), expected)


@needs_pyarrow
@pytest.mark.parametrize("shape", [(0,), (5,)], ids=str)
@pytest.mark.parametrize("dtype", PYARROW_DTYPES)
def test_pyarrow_from_rust(dtype, shape, no_leaks):
    t, expected = rust_tensor(dtype, shape)
    pt = pa.Tensor.from_dlpack(t)
    assert pt.shape == shape
    np.testing.assert_array_equal(pt.to_numpy(), expected)


@needs_array_api_strict
def test_array_api_strict_from_rust(no_leaks):
    t, expected = rust_tensor("float64", (2, 3))
    x = xp.from_dlpack(t)
    assert x.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(x._array), expected)


# README, Compatibility: what each peer asks a producer for, and what it refuses.


@needs_pyarrow
@pytest.mark.parametrize("convert", ["Array", "Tensor"])
def test_pyarrow_asks_versioned_1_3_without_legacy_fallback(convert, no_leaks):
    from_dlpack = getattr(pa, convert).from_dlpack
    t, expected = rust_tensor("int32", (4,))
    p = RecordingProducer(t)
    np.testing.assert_array_equal(from_dlpack(p).to_numpy(), expected)
    assert p.calls == [{"max_version": (1, 3), "dl_device": None, "copy": None}]
    assert p.capsules == ["dltensor_versioned"]
    # A producer that only makes legacy capsules: pyarrow does not ask again without
    # max_version, the producer's TypeError is the answer.
    legacy = RecordingProducer(t, legacy=True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        from_dlpack(legacy)
    assert legacy.calls == [{"max_version": (1, 3), "dl_device": None, "copy": None}]
    assert legacy.capsules == []


@needs_pyarrow
def test_pyarrow_refuses_bool_and_arrays_of_other_than_1_d(no_leaks):
    for convert in (pa.Array.from_dlpack, pa.Tensor.from_dlpack):
        with pytest.raises(pa.ArrowInvalid, match="unsupported DLPack type"):
            convert(rust_tensor("bool", (3,))[0])
    # An Array is 1-D only (a Tensor takes any number of dimensions).
    for shape in [(2, 3), (), (1, 4)]:
        with pytest.raises(pa.ArrowInvalid, match="one dimensional"):
            pa.Array.from_dlpack(rust_tensor("float64", shape)[0])
    t, expected = rust_tensor("float64", (2, 3))
    np.testing.assert_array_equal(pa.Tensor.from_dlpack(t).to_numpy(), expected)


@needs_jax
def test_jax_needs_dlpack_device(no_leaks):
    t, expected = rust_tensor("float32", (3,), "class")
    bare = DlpackOnlyProducer(t)
    with pytest.raises(TypeError, match="__dlpack_device__"):
        jnp.from_dlpack(bare)
    assert bare.calls == []  # refused before asking for a capsule
    # With `__dlpack_device__` added, the same export is taken (as a legacy capsule).
    p = RecordingProducer(t)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(p)), expected)
    assert p.calls == [{"stream": None}]
    assert p.capsules == ["dltensor"]


@needs_array_api_strict
def test_array_api_strict_has_no_float16(no_leaks):
    assert not hasattr(xp, "float16")
    t, expected = rust_tensor("float16", (3,))
    with pytest.raises(TypeError, match="float16"):
        xp.from_dlpack(t)
    np.testing.assert_array_equal(np.from_dlpack(t), expected)  # numpy takes the same export


@needs_numpy_versioned
@pytest.mark.parametrize("kind", ["ready", "class"])
def test_zero_copy_write_visible_numpy(kind, no_leaks):
    t, _ = rust_tensor("float64", (2, 3), kind)
    a = np.from_dlpack(t)
    b = np.from_dlpack(t)  # a second export of the same object: same memory
    assert a.ctypes.data == b.ctypes.data
    assert ext.inspect(t)["data_ptr"] == a.ctypes.data
    a[1, 2] = 42.0
    assert b[1, 2] == 42.0
    back = np.frombuffer(ext.to_bytes(t), dtype=np.float64).reshape(2, 3)
    assert back[1, 2] == 42.0


@needs("torch", "jax")
def test_zero_copy_torch_and_jax(no_leaks):
    t, _ = rust_tensor("float32", (4,), "class")
    x = torch.from_dlpack(t)
    j = jnp.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr
    assert j.unsafe_buffer_pointer() == t.data_ptr
    x[0] = 9.0  # visible to the Rust owner and to the other consumers
    assert np.frombuffer(ext.to_bytes(t), dtype=np.float32)[0] == 9.0
    assert np.from_dlpack(t)[0] == 9.0


STRIDED = [
    # (shape, strides (elements), byte_offset (elements), buffer length)
    ((3,), (2,), 0, 6),            # x[::2]
    ((3, 2), (1, 3), 0, 6),        # transpose
    ((4,), (-1,), 3, 4),           # negative stride x[::-1]
    ((2, 1, 3), (3, 99, 1), 0, 6), # size-1 dim with an odd stride
    ((2, 2), (2, 1), 1, 5),        # byte_offset
]


@pytest.mark.parametrize("shape,strides,offset,length", STRIDED, ids=str)
def test_strided_export_to_numpy(shape, strides, offset, length, no_leaks):
    buf = np.arange(length, dtype=np.int32)
    t = ext.make_tensor(buf.tobytes(), "int32", list(shape), strides=list(strides),
                        byte_offset=offset * 4)
    expected = np.lib.stride_tricks.as_strided(
        buf[offset:], shape=shape, strides=[s * 4 for s in strides]) if min(strides) >= 0 else \
        buf[offset::-1][: shape[0]]
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(a, expected)
    # numpy keeps every stride as given, size-1 dimensions' included.
    assert tuple(s // 4 for s in a.strides) == strides
    info = ext.inspect(t)
    assert info["strides"] == list(strides)
    # Our export keeps the offset in `byte_offset`; the first element's address is the same
    # for our importer and for numpy (which folds the offset into its pointer).
    assert info["byte_offset"] == offset * 4
    assert info["data_ptr"] == a.ctypes.data


@needs_torch
def test_strided_export_to_torch():
    buf = np.arange(6, dtype=np.float32)
    t = ext.make_tensor(buf.tobytes(), "float32", [3, 2], strides=[1, 3])
    x = torch.from_dlpack(t)
    assert x.stride() == (1, 3)
    np.testing.assert_array_equal(x.numpy(), buf.reshape(2, 3).T)


def test_copy_true_is_a_real_copy(no_leaks):
    buf = np.arange(6, dtype=np.float64)
    t = ext.make_tensor(buf.tobytes(), "float64", [3, 2], strides=[1, 3])
    info = ext.inspect_with(t, copy=True)
    assert info["copied"] and not info["read_only"]
    assert info["strides"] == [2, 1]  # compact
    assert info["data_ptr"] != ext.inspect(t)["data_ptr"]
    assert info["data_ptr"] % 64 == 0
    np.testing.assert_array_equal(
        np.frombuffer(info["bytes"], dtype=np.float64), buf.reshape(2, 3).T.ravel())
    if not NUMPY_VERSIONED:  # numpy 2.0's from_dlpack takes no `copy`
        with pytest.raises(TypeError):
            np.from_dlpack(t, copy=True)
        return
    a = np.from_dlpack(t, copy=True)
    a[0, 0] = -1.0
    assert np.from_dlpack(t)[0, 0] == 0.0


def test_copy_false_is_zero_copy():
    t, _ = rust_tensor("int16", (4,))
    info = ext.inspect_with(t, copy=False)
    assert not info["copied"]
    assert info["data_ptr"] == ext.inspect(t)["data_ptr"]


def test_read_only_export(no_leaks):
    t, expected = rust_tensor("float32", (3,), read_only=True)
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__(copy=False)
    # A legacy request without copy=False gets a copy.
    assert ext.inspect(t.__dlpack__())["data_ptr"] != ext.inspect(t)["data_ptr"]
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(a, expected)
    if NUMPY_VERSIONED:  # numpy asks for a versioned capsule: shared, read-only
        assert not a.flags.writeable
        assert a.ctypes.data == ext.inspect(t)["data_ptr"]
    assert ext.inspect(t)["read_only"]
    with pytest.raises(BufferError):
        ext.add_one(t)
    with pytest.raises(BufferError):
        ext.make_capsule(expected.tobytes(), "float32", [3], versioned=False, read_only=True)
    cap = ext.make_capsule(expected.tobytes(), "float32", [3], versioned=True, read_only=True)
    assert ext.inspect(cap)["read_only"]


def test_tensor_class_properties():
    t, _ = rust_tensor("uint8", (2, 3))
    assert type(t).__name__ == "Tensor"
    assert type(t).__module__ == "dlpack_rs"
    assert t.shape == [2, 3]
    assert t.strides == [3, 1]
    assert t.dtype == "uint8"
    assert t.device == (1, 0)
    assert t.__dlpack_device__() == (1, 0)
    assert repr(t) == "Tensor(shape=(2, 3), dtype=uint8, device=cpu:0, strides=(3, 1))"
    e = ext.make_export_f64([2, 2])
    np.testing.assert_array_equal(np.from_dlpack(e), [[0.0, 1.0], [2.0, 3.0]])


@needs_torch
def test_export_of_capsules_from_into_capsule(no_leaks):
    a = sample("int64", (4,))
    for versioned in (False, True):
        cap = ext.make_capsule(a.tobytes(), "int64", [4], versioned=versioned)
        assert torch.from_dlpack(cap).tolist() == a.tolist()
    # Unconsumed capsules free their tensor in their destructor.
    before = live()
    cap = ext.make_capsule(a.tobytes(), "int64", [4], versioned=True)
    assert live() == before + 1
    del cap
    collect()
    assert live() == before
