"""ndarray integration (dlpack-rs feature `ndarray`): numpy and torch tensors read and written
in place through `ArrayViewD` / `ArrayViewMutD` with their exact layout, and ndarray `Array` /
`ArcArray` values exported to numpy and torch without a copy."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import dlpack_testext as ext
# numpy < 2.1 (the last for Python 3.9 is 2.0) asks for legacy capsules only: its imports are
# read-only and it cannot export a read-only array at all.
from conftest import NUMPY_VERSIONED, needs_torch, torch


def base(shape=(4, 6), dtype="float32"):
    return np.arange(int(np.prod(shape))).astype(dtype).reshape(shape)


# Views of a 4x6 base array `b`, each a layout DLPack must carry as is.
LAYOUTS = {
    "contiguous": lambda b: b,
    "transposed": lambda b: b.T,
    "negative": lambda b: b[::-1, ::-2],
    "window": lambda b: b[1:3, 2:5],  # first element not at the buffer start
    "size1-odd-stride": lambda b: as_strided(b, shape=(1, 3), strides=(12345 * b.itemsize, 2 * b.itemsize)),
    "empty": lambda b: b[:0],
    "0-d": lambda b: b[1:2, 2:3].reshape(()),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_numpy_view_has_the_exact_layout(layout, dtype):
    a = LAYOUTS[layout](base(dtype=dtype))
    shape, strides, values = ext.nd_view(a)
    assert tuple(shape) == a.shape
    assert values == a.ravel().tolist()
    # Size-1 dimensions are never stepped along: their stride is free (the view uses 0).
    expected = [s // a.itemsize if n > 1 else 0 for n, s in zip(a.shape, a.strides)]
    if a.size:
        assert [s if n > 1 else 0 for n, s in zip(shape, strides)] == expected


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "negative", "window", "size1-odd-stride"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_numpy_written_in_place(layout, dtype):
    whole = base(dtype=dtype)
    before = whole.copy()
    expected = whole.copy()
    LAYOUTS[layout](expected)[...] *= 3
    if not NUMPY_VERSIONED:
        # numpy 2.0 exports legacy capsules only, which cannot say read-only: such imports are
        # read-only (as numpy itself treats them), so nothing is written.
        with pytest.raises(BufferError, match="read-only"):
            ext.nd_scale(LAYOUTS[layout](whole), 3.0)
        np.testing.assert_array_equal(whole, before)
        return
    ext.nd_scale(LAYOUTS[layout](whole), 3.0)
    # Exactly the viewed elements changed, by the factor; the rest of the buffer did not.
    np.testing.assert_array_equal(whole, expected)
    assert not np.array_equal(whole, before)


def test_numpy_refusals():
    ro = base()
    ro.flags.writeable = False
    # Refused by our as_array_mut (numpy >= 2.1 exports it flagged READ_ONLY), or by numpy.
    with pytest.raises(BufferError, match="read-only" if NUMPY_VERSIONED else "readonly"):
        ext.nd_scale(ro, 2.0)
    if NUMPY_VERSIONED:
        assert ext.nd_view(ro)[2] == ro.ravel().tolist()  # reading is fine
    # Writable, but stride 0 on a long dimension: two indices share an element.
    bcast = as_strided(base((1, 4)), shape=(3, 4), strides=(0, 4))
    with pytest.raises(BufferError, match="more than once" if NUMPY_VERSIONED else "read-only"):
        ext.nd_scale(bcast, 2.0)
    with pytest.raises(TypeError, match="dtype mismatch"):
        ext.nd_affine(base())  # float32 where float64 is asked for
    # Misaligned: float32 elements starting one byte into the buffer.
    raw = np.zeros(20, dtype=np.uint8)
    mis = np.frombuffer(raw.data, dtype=np.float32, count=4, offset=1)
    with pytest.raises(BufferError, match="not aligned"):
        ext.nd_view(mis)


@pytest.mark.parametrize("layout", ["contiguous", "negative", "transposed"])
def test_numpy_round_trip_through_a_new_array(layout):
    a = LAYOUTS[layout](base(dtype="float64"))
    out = np.from_dlpack(ext.nd_affine(a))
    np.testing.assert_array_equal(out, 2 * a + 1)
    assert out.flags.writeable == NUMPY_VERSIONED


EXPORTS = {
    "c": np.arange(24.0).reshape(2, 3, 4),
    "f": np.asfortranarray(np.arange(12.0).reshape(4, 3).T),
    "neg": np.arange(12.0).reshape(3, 4)[::-1, ::-2],
    "transposed": np.arange(12.0).reshape(3, 4).T,
    "shared": np.arange(6.0).reshape(2, 3),
    "unique": np.arange(6.0).reshape(2, 3),
}


@pytest.mark.parametrize("layout", sorted(EXPORTS))
def test_array_export_to_numpy_is_zero_copy(layout):
    t, first = ext.nd_export(layout)
    a = np.from_dlpack(t)
    if layout == "shared" and not NUMPY_VERSIONED:
        # numpy 2.0 asks for a legacy capsule, which cannot say read-only: a (compact) copy.
        np.testing.assert_array_equal(a, EXPORTS[layout])
        assert a.__array_interface__["data"][0] != first
        return
    expected = EXPORTS[layout]
    np.testing.assert_array_equal(a, expected)
    assert a.strides == expected.strides  # the array's own layout, not a contiguous copy
    assert a.__array_interface__["data"][0] == first
    assert a.flags.writeable == (NUMPY_VERSIONED and layout != "shared")


@needs_torch
def test_torch_views_and_in_place_writes():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    shape, strides, values = ext.nd_view(x.t())
    assert (tuple(shape), tuple(strides)) == ((4, 3), (1, 4))
    assert values == x.t().flatten().tolist()
    window = x[1:, ::2]  # storage offset and a step
    ext.nd_scale(window, -1.0)
    expected = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    expected[1:, ::2] *= -1
    assert torch.equal(x, expected)
    out = torch.from_dlpack(ext.nd_affine(x.double().t()))
    assert torch.equal(out, 2 * x.double().t() + 1)


@needs_torch
@pytest.mark.parametrize("layout", ["c", "f", "transposed", "unique"])
def test_array_export_to_torch_is_zero_copy(layout):
    t, first = ext.nd_export(layout)
    x = torch.from_dlpack(t)
    expected = EXPORTS[layout]
    assert x.data_ptr() == first
    assert tuple(x.stride()) == tuple(s // 8 for s in expected.strides)
    np.testing.assert_array_equal(x.numpy(), expected)


@needs_torch
def test_torch_refuses_negative_strides():
    t, _ = ext.nd_export("neg")
    with pytest.raises(Exception):  # torch has no negative strides
        torch.from_dlpack(t)
