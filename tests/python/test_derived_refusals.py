"""A derived class whose shape, strides or byte offset describe more bytes than its data field
holds (a layout a Python constructor chooses) is refused with `BufferError` on every route,
never with a panic (`pyo3_runtime.PanicException`, which `except Exception` does not catch)."""

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import jnp, needs_jax, needs_torch, torch

BAD_LAYOUTS = [
    pytest.param(([5], None, 0), r"address bytes 0\.\.20 of field `values`, which holds 16 bytes", id="shape"),
    pytest.param(([2, 2], [3, 1], 0), r"address bytes 0\.\.20 of field `values`", id="strides"),
    pytest.param(([4], None, 4), r"address bytes 4\.\.20 of field `values`", id="byte_offset"),
    pytest.param(([2], [-1], 0), r"address bytes -4\.\.4 of field `values`", id="negative_stride"),
]


def oversized(layout):
    shape, strides, offset = layout
    return ext.Oversized([1.0, 2.0, 3.0, 4.0], shape, strides, offset)


@pytest.mark.parametrize("layout,message", BAD_LAYOUTS)
def test_numpy_and_the_protocol_methods_raise_buffer_error(layout, message):
    o = oversized(layout)
    with pytest.raises(BufferError, match=message):
        np.from_dlpack(o)
    with pytest.raises(BufferError, match=message):
        o.__dlpack__()
    with pytest.raises(BufferError, match=message):
        o.__dlpack__(max_version=(1, 3))
    with pytest.raises(BufferError, match=message):
        o.__dlpack_device__()


@pytest.mark.parametrize("layout,message", BAD_LAYOUTS)
def test_imports_in_rust_raise_buffer_error(layout, message):
    o = oversized(layout)
    with pytest.raises(BufferError, match=message):
        ext.import_info(o)
    # A typed argument takes the class's exchange table.
    with pytest.raises(BufferError, match=message):
        ext.tr_sum(o)


@needs_torch
@pytest.mark.parametrize("layout,message", BAD_LAYOUTS)
def test_torch_raises_buffer_error(layout, message):
    with pytest.raises(BufferError, match=message):
        torch.from_dlpack(oversized(layout))


@needs_jax
@pytest.mark.parametrize("layout,message", BAD_LAYOUTS)
def test_jax_raises_buffer_error(layout, message):
    with pytest.raises(BufferError, match=message):
        jnp.from_dlpack(oversized(layout))


def test_a_layout_inside_the_field_is_exported():
    o = ext.Oversized([1.0, 2.0, 3.0, 4.0], [2], [2], 4)
    assert np.from_dlpack(o).tolist() == [2.0, 4.0]


def test_an_image_buffer_field_is_checked_too():
    bad = ext.OversizedImage(2, 2, [2, 2, 4])
    with pytest.raises(BufferError, match=r"address bytes 0\.\.16 of field `pixels`, which holds 12 bytes"):
        np.from_dlpack(bad)
    with pytest.raises(BufferError, match="which holds 12 bytes"):
        ext.import_info(bad)
    assert np.from_dlpack(ext.OversizedImage(2, 2, [2, 2, 3])).shape == (2, 2, 3)
