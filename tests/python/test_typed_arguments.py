"""Typed arguments with every kind of constraint (issue 26): any-layout views (`TensorView`,
`TensorViewMut`), fixed shapes, C / F layouts, dtype sets (`AnyOf` / `AnyOfMut`), results handed
back as the caller's framework, and one error vocabulary, with numpy, torch and jax producers."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import dlpack_testext as ext

from conftest import NUMPY_VERSIONED, jax, jnp, needs_jax, needs_numpy_versioned, needs_torch, torch


def base(dtype=np.float64):
    return np.arange(24, dtype=dtype).reshape(4, 6)


NUMPY_LAYOUTS = {
    "c": lambda a: a,
    "transposed": lambda a: a.T,
    "sliced": lambda a: a[::2, 1::2],
    "negative": lambda a: a[::-1, ::-2],
    "fortran": np.asfortranarray,
}


# ---- any layout ---------------------------------------------------------------------------

@pytest.mark.parametrize("layout", NUMPY_LAYOUTS)
def test_numpy_views_read_any_layout(layout):
    x = NUMPY_LAYOUTS[layout](base())
    shape, strides, values = ext.tv_values(x)
    assert shape == list(x.shape)
    assert strides == [s // 8 for s in x.strides]
    assert values == x.ravel().tolist()


@needs_torch
@pytest.mark.parametrize("layout", ["c", "transposed", "sliced", "fortran"])
def test_torch_views_read_any_layout(layout):
    t = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    x = {"c": t, "transposed": t.T, "sliced": t[::2, 1::2], "fortran": t.T.contiguous().T}[layout]
    shape, strides, values = ext.tv_values(x)
    assert shape == list(x.shape)
    assert strides == list(x.stride())
    assert values == x.flatten().tolist()


@needs_jax
def test_jax_views_read():
    x = jnp.arange(24, dtype=jnp.float32).reshape(4, 6).T
    assert ext.tv_sum2(x) == 276.0
    assert ext.tv_peak(jnp.arange(12, dtype=jnp.uint8).reshape(2, 2, 3)) == ("uint8", 11.0)


@needs_numpy_versioned  # numpy 2.0 exports legacy capsules: read-only imports
@pytest.mark.parametrize("layout", ["c", "transposed", "sliced", "negative"])
def test_numpy_written_in_place_through_any_layout(layout):
    a = base(np.float32)
    x = NUMPY_LAYOUTS[layout](a)
    expected = a.copy()
    view = NUMPY_LAYOUTS[layout](expected)
    for i in range(view.shape[0]):
        for j in range(view.shape[1]):
            view[i, j] = 10 * i + j
    ext.tvm_fill(x)
    np.testing.assert_array_equal(a, expected)


@needs_torch
def test_torch_written_in_place_through_a_transpose():
    t = torch.zeros(3, 2)
    ext.tvm_fill(t.T)
    assert t.tolist() == [[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]]


@needs_numpy_versioned  # numpy 2.0 exports legacy capsules: read-only imports
def test_numpy_add_into_a_reversed_view():
    dst = np.zeros(8)
    src = np.arange(8.0)
    ext.tvm_add_into(dst[::-2], src[::2])
    assert dst.tolist() == [0.0, 6.0, 0.0, 4.0, 0.0, 2.0, 0.0, 0.0]


@needs_numpy_versioned  # numpy 2.0 exports legacy capsules: read-only imports
def test_one_memory_as_source_and_destination_is_refused():
    x = np.arange(4.0)
    # `dst` holds the exclusive borrow first; `src` is refused.
    with pytest.raises(BufferError, match=r"^the tensor's memory is mutably borrowed by another "
                                          r"view.*(\nwhile processing 'src')?"):
        ext.tvm_add_into(x, x[::-1])
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    # Disjoint halves of one array are two memories.
    ext.tvm_add_into(x[:2], x[2:])
    assert x.tolist() == [2.0, 4.0, 2.0, 3.0]


@needs_numpy_versioned
def test_numpy_broadcast_view_cannot_be_written():
    a = np.zeros(3, np.float32)
    x = as_strided(a, shape=(2, 3), strides=(0, 4))
    with pytest.raises(BufferError, match=r"expected a writable tensor whose elements are distinct, "
                                          r"got shape \(2, 3\) with strides \(0, 1\).*x\.copy\(\)"):
        ext.tvm_fill(x)
    assert ext.tv_sum2(x) == 0.0  # reading it is fine


@needs_torch
def test_torch_expanded_view_cannot_be_written():
    x = torch.zeros(3).expand(2, 3)
    with pytest.raises(BufferError, match="elements are distinct.*x.clone"):
        ext.tvm_fill(x)


# ---- layout constraints -------------------------------------------------------------------

def test_c_layout_constraint():
    a = base()
    assert ext.tv_c_sum(a) == a.sum()
    with pytest.raises(BufferError, match=r"expected a C-contiguous \(row-major\) tensor .*"
                                          r"np\.ascontiguousarray\(x\).*got shape \(6, 4\) with "
                                          r"strides \(1, 6\)"):
        ext.tv_c_sum(a.T)


def test_f_layout_constraint():
    a = base()
    assert ext.tv_f_memory(np.asfortranarray(a)) == a.T.ravel().tolist()
    with pytest.raises(BufferError, match=r"expected an F-contiguous \(column-major\) tensor .*"
                                          r"np\.asfortranarray\(x\).*got shape \(4, 6\) with "
                                          r"strides \(6, 1\)"):
        ext.tv_f_memory(a)


@needs_torch
def test_torch_layout_constraints():
    t = torch.arange(24, dtype=torch.float64).reshape(6, 4).T  # F-contiguous 4x6
    assert ext.tv_f_memory(t) == list(range(24))
    with pytest.raises(BufferError, match="C-contiguous.*x.contiguous"):
        ext.tv_c_sum(t)


@needs_jax
def test_jax_layout_constraints():
    # jax exports row-major arrays: a matrix is refused where column-major is asked for, a
    # column (n, 1), both C- and F-contiguous, is taken.
    x = jnp.arange(24, dtype=jnp.float32).reshape(4, 6)
    with pytest.raises(BufferError, match=r"^expected an F-contiguous \(column-major\) tensor .*"
                                          r"got shape \(4, 6\) with strides \(6, 1\)"):
        ext.tv_f_memory32(x)
    assert ext.tv_f_memory32(x.reshape(24, 1)) == list(range(24))
    with pytest.raises(TypeError, match="expected a tensor of float64, got float32"):
        ext.tv_f_memory(x)


# ---- shape constraints --------------------------------------------------------------------

def test_fixed_extents_are_checked():
    with pytest.raises(TypeError, match=r"^expected shape \(\*, \*, 3\), got \(48, 64, 4\)(\nwhile processing 'image')?$"):
        ext.tv_gray(np.zeros((48, 64, 4), np.float32))
    with pytest.raises(TypeError, match=r"^expected shape \(\*, \*, 3\), got \(5,\)"):
        ext.tv_gray(np.zeros(5, np.float32))
    with pytest.raises(TypeError, match=r"^expected shape \(2, \*\), got \(3, 4\)(\nwhile processing 'x')?$"):
        ext.tv_pairs(np.zeros((3, 4), np.int64))
    assert ext.tv_pairs(np.arange(8).reshape(2, 4)) == 28


def test_number_of_dimensions_is_checked():
    with pytest.raises(TypeError, match=r"^expected a 2-dimensional tensor, got 1 dimension\(s\) "
                                        r"\(shape \(5,\)\)(\nwhile processing 'x')?$"):
        ext.tv_sum2(np.zeros(5, np.float32))


@needs_torch
def test_torch_shapes():
    with pytest.raises(TypeError, match=r"expected shape \(\*, \*, 3\), got \(4, 5, 4\)"):
        ext.tv_gray(torch.zeros(4, 5, 4))
    with pytest.raises(TypeError, match=r"expected shape \(2, \*\), got \(1, 4\)"):
        ext.tv_pairs(torch.zeros(1, 4, dtype=torch.int64))


@needs_jax
def test_jax_shapes():
    with pytest.raises(TypeError, match=r"expected shape \(\*, \*, 3\), got \(4, 5\)"):
        ext.tv_gray(jnp.zeros((4, 5), jnp.float32))


# ---- dtype sets ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["uint8", "uint16", "float32"])
def test_numpy_dtype_set(dtype):
    img = np.arange(24, dtype=dtype).reshape(2, 4, 3)
    assert ext.tv_peak(img) == (dtype, 23.0)
    # Any layout, and the shape is checked for every member.
    assert ext.tv_peak(img[:, ::-1]) == (dtype, 23.0)
    with pytest.raises(TypeError, match=r"expected shape \(\*, \*, 3\), got \(2, 3, 4\)"):
        ext.tv_peak(img.reshape(2, 3, 4))


def test_dtype_outside_the_set_names_every_member():
    with pytest.raises(TypeError, match=r"^expected a tensor of uint8, uint16 or float32, got "
                                        r"float64 \(convert it first"):
        ext.tv_peak(np.zeros((2, 2, 3)))
    with pytest.raises(TypeError, match=r"^expected a tensor of int32 or float64, got int8 "):
        ext.tv_which(np.zeros(3, np.int8))
    assert ext.tv_which(np.zeros(3, np.int32)) == "int32"
    assert ext.tv_which(np.zeros(3)) == "float64"


@needs_torch
def test_torch_dtype_set():
    assert ext.tv_peak(torch.full((2, 2, 3), 7, dtype=torch.uint8)) == ("uint8", 7.0)
    assert ext.tv_peak(torch.full((2, 2, 3), 1.5)) == ("float32", 1.5)
    with pytest.raises(TypeError, match="expected a tensor of uint8, uint16 or float32, got int64"):
        ext.tv_peak(torch.zeros(2, 2, 3, dtype=torch.int64))


@needs_jax
def test_jax_dtype_set():
    assert ext.tv_peak(jnp.full((2, 2, 3), 9, jnp.uint16)) == ("uint16", 9.0)
    assert ext.tv_peak(jnp.full((2, 2, 3), 2.5, jnp.float32)) == ("float32", 2.5)
    with pytest.raises(TypeError, match="expected a tensor of uint8, uint16 or float32, got int32"):
        ext.tv_peak(jnp.zeros((2, 2, 3), jnp.int32))


# ---- dtype errors -------------------------------------------------------------------------

def test_view_dtype_error_speaks_python_names():
    with pytest.raises(TypeError, match=r'^expected a tensor of float64, got float32 \(convert it '
                                        r'first, e\.g\. x\.astype\("float64"\)'):
        ext.tv_values(np.zeros(3, np.float32))


def test_pytensor_as_slice_dtype_error_speaks_python_names():
    with pytest.raises(TypeError, match=r'^dtype mismatch: expected a tensor of float32, got '
                                        r'float64 \(convert it first'):
        ext.as_slice_values(np.zeros(3), "float32")


def test_not_a_tensor_does_not_offer_a_capsule():
    with pytest.raises(TypeError, match=r"^expected an object with __dlpack__ \(") as info:
        ext.tv_values([1.0, 2.0])
    assert "capsule" not in str(info.value)
    with pytest.raises(TypeError, match=r"^expected an object with __dlpack__ \("):
        ext.tr_sum(object())


# ---- read-only, said why ------------------------------------------------------------------

@needs_numpy_versioned
def test_read_only_numpy_array_is_named_as_such():
    a = np.zeros(3, np.float32)
    a.flags.writeable = False
    for f in (ext.tm_touch, ext.tvm_fill):
        with pytest.raises(BufferError, match=r"read-only one: its producer exported it READ_ONLY "
                                              r"\(a numpy array whose flags\.writeable is False") \
                as info:
            f(a if f is ext.tm_touch else a.reshape(1, 3))
        assert "legacy" not in str(info.value)
    assert a.tolist() == [0.0, 0.0, 0.0]


class LegacyOnly:
    """A producer older than DLPack 1.0: `__dlpack__` takes `stream` only."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_legacy_capsule_is_named_as_such():
    a = np.zeros((1, 3), np.float32)
    for f in (ext.tm_touch, ext.tvm_fill):
        with pytest.raises(BufferError, match=r"read-only one: it came as a legacy \(unversioned\) "
                                              r"DLPack capsule"):
            f(LegacyOnly(a))
    assert a.tolist() == [[0.0, 0.0, 0.0]]


@needs_jax
def test_jax_arrays_cannot_be_written():
    with pytest.raises(BufferError, match=r"legacy \(unversioned\) DLPack capsule"):
        ext.tvm_fill(jnp.zeros((2, 3), jnp.float32))


# ---- any device -----------------------------------------------------------------------------

def on_cuda(shape=(3,), **kwargs):
    # Host bytes labelled CUDA device 0: nothing dereferences them, only the metadata is read.
    # A frozen Rust class, which Rust still reads: its exports hold a shared borrow.
    return ext.RustTensor(bytes(12), "float32", list(shape), device=(2, 0), **kwargs)


def owned_on_cuda(shape=(3,), nbytes=12, **kwargs):
    # The same as a dlpack_rs.Tensor, which owns its tensor outright: writable arguments take it.
    return ext.make_tensor(bytes(nbytes), "float32", list(shape), device=(2, 0), **kwargs)


def test_host_arguments_refuse_device_memory_naming_the_fix():
    for f, shape in ((ext.tr_sum, (3,)), (ext.tm_touch, (3,)), (ext.tv_sum2, (1, 3)),
                     (ext.tvm_fill, (3, 1))):
        for t in (on_cuda(shape), owned_on_cuda(shape)):
            with pytest.raises(BufferError, match=r"^expected a tensor in CPU memory: .*copy it "
                                                  r"to the host first \(x\.cpu\(\) in torch, "
                                                  r"jax\.device_get\(x\) in jax\)"):
                f(t)


def test_any_device_argument_takes_device_memory():
    t = on_cuda()
    device, shape, strides, dtype, ptr = ext.dt_info(t)
    assert (device, shape, strides, dtype) == ((2, 0), [3], [1], "float32")
    assert ptr == t.data_ptr
    # Rust still reads a frozen class's data: no writable argument of it.
    with pytest.raises(BufferError, match="already borrowed"):
        ext.dtm_target(t)
    owned = owned_on_cuda()
    ptr = ext.inspect(owned)["data_ptr"]
    assert ext.dt_info(owned) == ((2, 0), [3], [1], "float32", ptr)
    assert ext.dtm_target(owned) == ((2, 0), ptr)


def test_any_device_argument_checks_dtype_layout_and_writability():
    with pytest.raises(TypeError, match=r"^expected a tensor of float32, got float64 "):
        ext.dt_info(ext.RustTensor(bytes(24), "float64", [3], device=(2, 0)))
    with pytest.raises(TypeError, match=r"^expected a 1-dimensional tensor, got 2 dimension\(s\)"):
        ext.dtm_target(owned_on_cuda((1, 3)))
    strided = owned_on_cuda(nbytes=24, strides=[2])
    assert ext.dt_info(strided)[2] == [2]
    with pytest.raises(BufferError, match=r"^expected a C-contiguous \(row-major\) tensor"):
        ext.dtm_target(strided)
    with pytest.raises(BufferError, match=r"^expected a writable tensor, got a read-only one"):
        ext.dtm_target(owned_on_cuda(read_only=True))
    t = owned_on_cuda()
    with pytest.raises(BufferError, match="already borrowed"):
        ext.dt_pair(t, t)
    assert ext.dt_pair(t, owned_on_cuda()) == ([3], [3])


def test_any_device_argument_takes_host_memory_too():
    a = np.arange(6, dtype=np.float32).reshape(2, 3).T
    device, shape, strides, dtype, ptr = ext.dt_info(a)
    assert (device, shape, strides, dtype) == ((1, 0), [3, 2], [1, 3], "float32")
    assert ptr == a.ctypes.data


# ---- results in the caller's framework ----------------------------------------------------

def expected_gray(img):
    return np.asarray(img, dtype=np.float32).sum(axis=2) / np.float32(3)


def test_numpy_caller_gets_numpy():
    img = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)
    out = ext.tv_gray(img[:, ::-1])
    assert type(out) is np.ndarray
    np.testing.assert_allclose(out, expected_gray(img[:, ::-1]))
    doubled = ext.tr_doubled(np.arange(4.0).reshape(2, 2).T)
    assert type(doubled) is np.ndarray
    assert doubled.tolist() == [[0.0, 4.0], [2.0, 6.0]]


@needs_torch
def test_torch_caller_gets_torch():
    img = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    out = ext.tv_gray(img)
    assert type(out) is torch.Tensor
    np.testing.assert_allclose(out.numpy(), expected_gray(img.numpy()))
    out[0, 0] = 5.0  # writable, and Rust's memory: nothing else sees it
    assert img[0, 0, 0] == 0.0


@needs_jax
def test_jax_caller_gets_jax():
    img = jnp.arange(2 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 3)
    out = ext.tv_gray(img)
    assert isinstance(out, jax.Array)
    np.testing.assert_allclose(np.asarray(out), expected_gray(np.asarray(img)))


def test_other_producers_get_a_dlpack_tensor():
    out = ext.tr_doubled(ext.make_export_f64([3]))
    assert type(out).__name__ == "Tensor"
    assert np.from_dlpack(out).tolist() == [0.0, 2.0, 4.0]


# Return values whose framework is part of the signature (`Returned<Numpy | Torch | Jax>`), or
# the caller's (`Returned<Framework>`).


def test_returned_numpy_from_any_caller():
    out = ext.ret_plus_one(np.arange(6.0).reshape(2, 3).T, "numpy")
    assert type(out) is np.ndarray
    assert out.tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]


@needs_torch
def test_returned_torch_from_a_numpy_caller():
    out = ext.ret_plus_one(np.arange(3.0), "torch")
    assert type(out) is torch.Tensor
    assert out.tolist() == [1.0, 2.0, 3.0]
    # The return type alone says torch: a numpy caller gets a writable torch tensor.
    tripled = ext.ret_torch_tripled(np.arange(4, dtype=np.float32))
    assert type(tripled) is torch.Tensor
    assert tripled.dtype == torch.float32
    tripled += 1
    assert tripled.tolist() == [1.0, 4.0, 7.0, 10.0]


@needs_jax
def test_returned_jax_from_a_torch_or_numpy_caller():
    out = ext.ret_plus_one(np.arange(3.0), "jax")
    assert isinstance(out, jax.Array)
    assert out.tolist() == [1.0, 2.0, 3.0]


@needs_torch
@needs_jax
def test_returned_like_the_caller():
    assert type(ext.ret_same_tripled(np.ones(2, dtype=np.float32))) is np.ndarray
    t = ext.ret_same_tripled(torch.ones(2))
    assert type(t) is torch.Tensor and t.tolist() == [3.0, 3.0]
    j = ext.ret_same_tripled(jnp.ones(2, dtype=jnp.float32))
    assert isinstance(j, jax.Array) and j.tolist() == [3.0, 3.0]
    assert type(ext.ret_plus_one(torch.arange(2.0, dtype=torch.float64), "caller")) is torch.Tensor


def test_both_result_doors_look_from_dlpack_up_at_each_call(monkeypatch):
    # `Returned<Numpy>` and `Returned<Framework>` for a numpy caller take the same route: the
    # package's `from_dlpack` as it is now, not as it was at the first call.
    x = np.arange(3.0)
    assert type(ext.ret_plus_one(x, "numpy")) is np.ndarray
    monkeypatch.setattr(np, "from_dlpack", lambda t: ("patched", type(t).__name__))
    assert ext.ret_plus_one(x, "numpy") == ("patched", "Tensor")
    assert ext.ret_plus_one(x, "caller") == ("patched", "Tensor")


@needs_numpy_versioned
def test_writable_dtype_set_dispatches_and_writes_in_place():
    img = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    view = img[:, ::-1]
    assert ext.tvm_invert_any(view) == "uint8"
    assert img.tolist() == (255 - np.arange(12, dtype=np.uint8)).reshape(2, 2, 3).tolist()
    f = np.full((2, 3), 0.25, dtype=np.float32)
    assert ext.tvm_invert_any(f.T) == "float32"
    assert f.tolist() == [[0.75] * 3] * 2
    w = np.array([1, 2], dtype=np.uint16)
    assert ext.tvm_invert_any(w) == "uint16" and w.tolist() == [65534, 65533]
    with pytest.raises(TypeError, match="expected a tensor of uint8, uint16 or float32, got int64"):
        ext.tvm_invert_any(np.zeros(3, dtype=np.int64))
    ro = np.zeros(3, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        ext.tvm_invert_any(ro)
    with pytest.raises(BufferError):
        ext.tvm_invert_any(np.broadcast_to(np.zeros(1, dtype=np.float32), (4,)))
