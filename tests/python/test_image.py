"""`image` integration (dlpack-rs feature `image`): an `ImageBuffer` made in Rust read by numpy,
torch and jax as an (H, W, C) array over its own pixels, and numpy / torch images viewed in
Rust as `ImageBuffer`s (read, and written in place)."""

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import jnp, needs_jax, needs_numpy_versioned, needs_torch, torch


def pattern(h, w):
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x, y, np.full_like(x, 200)], axis=-1).astype(np.uint8)


def test_an_image_buffer_is_an_hwc_numpy_array_over_its_own_pixels():
    t, ptr = ext.img_rgb(3, 5)
    a = np.from_dlpack(t)
    assert (a.shape, a.dtype, a.strides) == ((3, 5, 3), np.uint8, (15, 3, 1))
    assert a.ctypes.data == ptr  # zero-copy
    assert np.array_equal(a, pattern(3, 5))


@needs_torch
def test_torch_reads_the_image_zero_copy_and_writes_it():
    t, ptr = ext.img_rgb(2, 4)
    x = torch.from_dlpack(t)
    assert (tuple(x.shape), x.dtype, x.data_ptr()) == ((2, 4, 3), torch.uint8, ptr)
    x[0, 0, 0] = 99  # the export owns the image: writable
    assert np.from_dlpack(t)[0, 0, 0] == 99


@needs_jax
def test_jax_reads_a_float_image_returned_as_numpy():
    a = ext.img_luma_f32(2, 3)
    assert type(a) is np.ndarray and (a.shape, a.dtype) == ((2, 3, 1), np.float32)
    assert a[:, :, 0].tolist() == [[0.0, 1.0, 2.0], [10.0, 11.0, 12.0]]
    assert jnp.from_dlpack(a)[1, 2, 0] == 12.0


def test_a_numpy_image_is_viewed_as_an_image_buffer():
    a = pattern(4, 6)
    assert ext.img_channel_sums(a) == tuple(int(a[..., c].sum()) for c in range(3))
    # Not C-contiguous: no ImageBuffer view (it describes rows of packed pixels only).
    assert ext.img_channel_sums(a[:, ::2]) is None
    # The channel count is checked at extraction.
    with pytest.raises(TypeError, match=r"expected shape \(\*, \*, 3\), got \(4, 6, 4\)"):
        ext.img_channel_sums(np.zeros((4, 6, 4), np.uint8))


def test_one_channel_images_take_two_or_three_dimensions():
    assert ext.img_luma_dims(np.zeros((2, 5), np.float32)) == (5, 2)
    assert ext.img_luma_dims(np.zeros((2, 5, 1), np.float32)) == (5, 2)
    assert ext.img_luma_dims(np.zeros((2, 5, 3), np.float32)) is None
    assert ext.img_luma_dims(np.zeros((5,), np.float32)) is None


@needs_numpy_versioned  # numpy 2.0 exports legacy capsules only: its imports are read-only
def test_image_ops_write_a_numpy_image_in_place():
    a = pattern(3, 4)
    ptr = a.ctypes.data
    assert ext.img_invert(a) is True
    assert a.ctypes.data == ptr and np.array_equal(a, 255 - pattern(3, 4))
    assert ext.img_invert(a.transpose(1, 0, 2)) is False  # strided: refused, untouched
    ro = pattern(3, 4)
    ro.flags.writeable = False
    with pytest.raises(BufferError):
        ext.img_invert(ro)


@needs_torch
def test_image_ops_write_a_torch_image_in_place():
    x = torch.from_numpy(pattern(2, 2))
    assert ext.img_invert(x) is True
    assert x.numpy().tolist() == (255 - pattern(2, 2)).tolist()
