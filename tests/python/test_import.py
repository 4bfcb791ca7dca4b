"""Peer -> Rust: PyTensor imports from numpy, torch, jax, pyarrow, array-api-strict."""

import sys

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import (
    JAX_DTYPES, NUMPY_DTYPES, NUMPY_VERSIONED, PYARROW_DTYPES, SHAPES, TORCH_DTYPES, jnp, needs,
    needs_array_api_strict, needs_jax, needs_pyarrow, needs_torch, pa, sample, torch, xp,
)


def expected_bytes(a):
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_from_numpy(dtype, shape):
    a = sample(dtype, shape)
    info = ext.inspect(a)
    assert info["shape"] == list(shape)
    assert info["dtype"] == dtype
    assert info["device"] == (1, 0)
    # numpy 2.0 exports legacy capsules only (and our import of one is read-only).
    assert info["versioned"] == NUMPY_VERSIONED
    assert info["read_only"] == (not NUMPY_VERSIONED)
    if NUMPY_VERSIONED:
        assert info["version"][0] == 1
    assert info["nbytes"] == a.nbytes
    assert info["numel"] == a.size
    if a.size:
        assert info["data_ptr"] == a.ctypes.data
    assert ext.to_bytes(a) == expected_bytes(a)


@needs_torch
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_from_torch(dtype, shape):
    a = sample(dtype, shape)
    if dtype == "bfloat16":
        x = torch.from_numpy(a.astype(np.int16)).view(torch.bfloat16)
    else:
        x = torch.from_numpy(a.copy())
    info = ext.inspect(x)
    assert info["shape"] == list(shape)
    assert info["dtype"] == dtype
    assert info["version"] == (1, 3)
    if x.numel():
        assert info["data_ptr"] == x.data_ptr()
    assert ext.to_bytes(x) == expected_bytes(a)


@needs_jax
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_from_jax(dtype, shape):
    a = sample(dtype, shape)
    j = jnp.asarray(a.view(jnp.bfloat16) if dtype == "bfloat16" else a)
    info = ext.inspect(j)
    assert info["shape"] == list(shape)
    assert info["dtype"] == dtype
    assert not info["versioned"]  # jax only produces legacy capsules
    assert ext.to_bytes(j) == expected_bytes(a)


@needs_pyarrow
@pytest.mark.parametrize("dtype", PYARROW_DTYPES)
def test_from_pyarrow(dtype):
    a = sample(dtype, (5,))
    arr = pa.array(a)
    info = ext.inspect(arr)
    assert info["shape"] == [5]
    assert info["dtype"] == dtype
    assert info["read_only"]
    assert ext.to_bytes(arr) == a.tobytes()
    if dtype != "float16":  # add_one has no f16 arithmetic
        with pytest.raises(BufferError):
            ext.add_one(arr)


@needs_array_api_strict
def test_from_array_api_strict():
    x = xp.asarray([[1.0, 2.0], [3.0, 4.0]], dtype=xp.float32)
    info = ext.inspect(x)
    assert info["shape"] == [2, 2] and info["dtype"] == "float32"
    assert ext.as_slice_values(x, "float32") == [1.0, 2.0, 3.0, 4.0]


@needs_torch
def test_write_in_place_numpy_and_torch():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    ext.add_one(a)
    np.testing.assert_array_equal(a, np.arange(1, 7).reshape(2, 3))
    x = torch.zeros(4, dtype=torch.float64)
    ext.add_one(x)
    assert x.tolist() == [1.0] * 4


def test_typed_slices():
    a = np.arange(5, dtype=np.float32)
    assert ext.as_slice_values(a, "float32") == [0.0, 1.0, 2.0, 3.0, 4.0]
    with pytest.raises(TypeError):
        ext.as_slice_values(a, "float64")  # dtype mismatch
    with pytest.raises(BufferError):
        ext.as_slice_values(a[::2], "float32")  # not contiguous
    with pytest.raises(BufferError):
        ext.add_one(np.arange(6.0)[::2])


def test_read_only_numpy():
    a = np.arange(4.0)
    a.flags.writeable = False
    if not NUMPY_VERSIONED:
        # numpy 2.0 cannot export a read-only array (a legacy capsule cannot say read-only).
        with pytest.raises(BufferError, match="readonly"):
            ext.inspect(a)
        return
    info = ext.inspect(a)
    assert info["read_only"] and info["versioned"]
    assert ext.to_bytes(a) == a.tobytes()
    with pytest.raises(BufferError):
        ext.add_one(a)


VIEWS = {
    "x[:, 0]": lambda x: x[:, 0],
    "x.T": lambda x: x.T,
    "x[::2]": lambda x: x[::2],
    "x[::-1]": lambda x: x[::-1],
    "x[:, ::-2]": lambda x: x[:, ::-2],
    "size-1 odd stride": lambda x: x[1:2, :],
    "offset x[1:, 1:]": lambda x: x[1:, 1:],
}


@pytest.mark.parametrize("name", VIEWS)
def test_views_numpy(name):
    base = np.arange(12, dtype=np.int16).reshape(3, 4)
    v = VIEWS[name](base)
    info = ext.inspect(v)
    assert info["shape"] == list(v.shape)
    assert info["strides"] == [s // 2 for s in v.strides]
    if v.size:
        assert info["data_ptr"] == v.ctypes.data
    assert ext.to_bytes(v) == np.ascontiguousarray(v).tobytes()


@needs_torch
@pytest.mark.parametrize("name", ["x[:, 0]", "x.T", "x[::2]", "offset x[1:, 1:]"])
def test_views_torch(name):
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    v = VIEWS[name](base)
    info = ext.inspect(v)
    assert info["shape"] == list(v.shape)
    assert tuple(info["strides"]) == v.stride()
    assert info["data_ptr"] == v.data_ptr()
    assert ext.to_bytes(v) == v.contiguous().numpy().tobytes()


def test_size1_odd_strides_numpy():
    base = np.arange(6, dtype=np.float64).reshape(2, 3)
    v = np.lib.stride_tricks.as_strided(base, shape=(2, 1, 3), strides=(24, 1000, 8))
    info = ext.inspect(v)
    assert info["contiguous"]
    assert ext.as_slice_values(v, "float64") == list(range(6))


@needs("torch", "jax")
def test_reexport_foreign_tensor():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ext.reexport(a)
    x = torch.from_dlpack(t)
    j = jnp.from_dlpack(t)  # jax copies memory that is not 64-byte aligned
    shared = a.ctypes.data % 64 == 0
    assert (j.unsafe_buffer_pointer() == a.ctypes.data) == shared
    assert x.data_ptr() == a.ctypes.data
    a[0, 0] = 100.0
    assert x[0, 0].item() == 100.0
    assert float(j[0, 0]) == (100.0 if shared else 0.0)
    assert np.asarray(j).ravel().tolist()[1:] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert repr(t).startswith("Tensor(shape=(2, 3), dtype=float32")


@needs_pyarrow
def test_reexport_read_only_keeps_flag():
    arr = pa.array(np.arange(3, dtype=np.int64))
    t = ext.reexport(arr)
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__(copy=False)  # legacy cannot carry READ_ONLY
    assert ext.to_bytes(t.__dlpack__()) == np.arange(3, dtype=np.int64).tobytes()  # a copy
    a = np.from_dlpack(t)
    assert not a.flags.writeable
    assert a.tolist() == [0, 1, 2]


def test_source_refcount_restored():
    a = np.arange(10.0)
    start = sys.getrefcount(a)
    h = ext.hold(a)
    assert sys.getrefcount(a) > start
    h.release()
    assert sys.getrefcount(a) == start
    ext.inspect(a)
    assert sys.getrefcount(a) == start


@needs_torch
def test_source_deleted_first():
    a = np.arange(6, dtype=np.int64) * 3
    expected = a.tobytes()
    h = ext.hold(a)
    del a
    x = torch.arange(4, dtype=torch.float64)
    hx = ext.hold(x)
    del x
    import gc
    gc.collect()
    assert h.to_bytes() == expected
    assert np.frombuffer(hx.to_bytes(), dtype=np.float64).tolist() == [0.0, 1.0, 2.0, 3.0]
    h.release()
    hx.release()


@needs_torch
def test_drop_foreign_on_other_thread():
    a = np.arange(8.0)
    start = sys.getrefcount(a)
    h = ext.hold(a)
    h.release_on_thread()  # numpy's deleter runs on a non-Python thread, GIL released
    assert sys.getrefcount(a) == start
    x = torch.arange(3.0)
    hx = ext.hold(x)
    hx.release_on_thread()
    assert x.tolist() == [0.0, 1.0, 2.0]


def test_import_options_device_and_copy():
    a = np.arange(4.0)
    info = ext.inspect_with(a, dl_device=(1, 0), copy=True)
    assert info["copied"]
    assert info["data_ptr"] != a.ctypes.data
    assert info["bytes"] == a.tobytes()
    info = ext.inspect_with(a, copy=False)
    assert info["data_ptr"] == a.ctypes.data
    # The producer's refusal is passed on: numpy 2.1 to 2.3 raised ValueError for a device it
    # cannot export to (numpy#30341, BufferError from 2.4 on); numpy 2.0, which takes no
    # dl_device, gets a legacy request and the importer refuses the device itself.
    numpy_value_error = NUMPY_VERSIONED and np.lib.NumpyVersion(np.__version__) < "2.4.0"
    with pytest.raises(ValueError if numpy_value_error else BufferError):
        ext.inspect_with(a, dl_device=(2, 0))
