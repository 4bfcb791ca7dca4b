"""`#[derive(IntoDLPack)]` from Python: derived classes consumed by numpy, torch and jax.

The classes live in tests/pyext/src/derived.rs, the cases in derived_cases.py. Each derived value
counts its creation and its drop (`ext.derived_counts()`), so the suite checks that every one is
dropped exactly once, after its last consumer. The `__dlpack__` keywords and frozen classes are
in test_derived_protocol.py, drop counts and refcounts in test_derived_lifetime.py.
"""

import ctypes
import sys

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import (
    NUMPY_VERSIONED, by_peer, jnp, needs, needs_jax, needs_numpy_versioned, needs_torch, sample,
    torch,
)
from derived_cases import (
    ALIGNED_KINDS, CASES, CLASS_CASES, consume, element_strides, source_ptr, to_numpy,
)


# ---------------------------------------------------------------------------------------------
# Consumers: values, shape, dtype, strides, zero copy


@pytest.mark.parametrize("consumer", by_peer(["numpy", "torch", "jax"]))
@pytest.mark.parametrize("case", list(CASES))
def test_consumer_reads_derived(case, consumer, derived_no_leaks):
    make, dtype, kind = CASES[case]
    obj, expected = make()
    if consumer == "numpy" and dtype == "bfloat16":
        # numpy has no bfloat16 of its own; from 2.5 it takes one when ml_dtypes (jax's) has
        # registered its bfloat16 type.
        if tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 5) and "ml_dtypes" in sys.modules:
            a = np.from_dlpack(obj)
            assert a.dtype.name == "bfloat16"
            assert a.view(np.uint16).tolist() == expected.view(np.uint16).tolist()
            assert a.ctypes.data == source_ptr(obj)
        else:
            with pytest.raises((RuntimeError, BufferError, TypeError)):
                np.from_dlpack(obj)
        return
    # Rust bool buffers are exported read-only (a consumer's write of a byte other than 0/1
    # would be undefined behaviour for Rust code reading the bool); jax (as numpy 2.0) only
    # takes legacy capsules, which cannot say read-only: it gets a copy (copy=None).
    copied = kind == "generic" and dtype == "bool" and (
        consumer == "jax" or (consumer == "numpy" and not NUMPY_VERSIONED))
    ptr = source_ptr(obj)
    x, xptr, strides, name = consume(consumer, obj)
    if kind == "generic" and dtype == "bool" and consumer == "numpy":
        assert not x.flags.writeable
    assert name == dtype
    assert tuple(x.shape) == expected.shape
    np.testing.assert_array_equal(to_numpy(x, dtype), expected)
    if strides is not None and expected.size > 1:
        assert strides == element_strides(expected)
    if kind in ALIGNED_KINDS:
        assert ptr % 64 == 0  # so JAX has no reason to copy
    if copied:
        assert xptr != ptr
    elif consumer == "jax":
        # XLA imports CPU memory zero-copy only when it is 64-byte aligned, and copies otherwise.
        assert (xptr == ptr) == (ptr % 64 == 0)
    else:
        assert xptr == ptr


@needs_jax
def test_jax_zero_copy_sees_rust_memory(derived_no_leaks):
    """A jax array over an aligned derived buffer sees a write made through numpy."""
    s = ext.DerivedSignal([1.0, 2.0, 3.0, 4.0])
    j = jnp.from_dlpack(s)
    assert j.unsafe_buffer_pointer() == s.data_ptr
    a = np.from_dlpack(s)
    a[2] = 30.0
    assert np.asarray(j)[2] == 30.0
    assert s.values == [1.0, 2.0, 30.0, 4.0]


@needs_numpy_versioned
def test_write_through_numpy_visible_in_rust_getter(derived_no_leaks):
    img = ext.derived_image(2, 2, 3)
    a = np.from_dlpack(img)
    a[1, 0, 2] = 200
    expected = (np.arange(12) % 256).astype(np.uint8)
    expected[1 * 6 + 0 * 3 + 2] = 200
    assert ext.derived_image_pixels(img) == expected.tobytes()


@needs_torch
@pytest.mark.parametrize("case", CLASS_CASES + ["generic-float64"])
def test_write_through_numpy_visible_to_second_consumer(case, derived_no_leaks):
    make, dtype, _ = CASES[case]
    obj, expected = make()
    a = np.from_dlpack(obj)
    x = torch.from_dlpack(obj)
    a[(0,) * a.ndim] = 99
    assert x[(0,) * a.ndim].item() == 99
    # ... and a third, fresh export sees it too: all three share the Rust buffer.
    assert np.from_dlpack(obj)[(0,) * a.ndim] == 99
    assert ext.inspect(obj)["data_ptr"] == a.ctypes.data == x.data_ptr()
    assert expected[(0,) * a.ndim] != 99  # the write really changed something


@needs_numpy_versioned
def test_write_into_transposed_lands_in_rust_row_major_buffer(derived_no_leaks):
    t = ext.derived_transposed(2, 3)  # rows=2, cols=3: exported shape (3, 2), strides (1, 3)
    a = np.from_dlpack(t)
    a[2, 1] = -7.0  # row 1, column 2 of the Rust matrix: element 1 * 3 + 2
    raw = np.ctypeslib.as_array((ctypes.c_float * 6).from_address(source_ptr(t)))
    np.testing.assert_array_equal(raw, [0.0, 1.0, 2.0, 3.0, 4.0, -7.0])


@needs_torch
def test_byte_offset_honoured(derived_no_leaks):
    w = ext.derived_window(10, 3, 4)
    info = ext.inspect(w)
    assert info["byte_offset"] == 3 * 8
    assert info["device"] == (1, 0)
    a = np.from_dlpack(w)
    np.testing.assert_array_equal(a, [3.0, 4.0, 5.0, 6.0])
    assert a.ctypes.data == info["data_ptr"]
    x = torch.from_dlpack(w)
    assert x.data_ptr() == info["data_ptr"]
    x[0] = -1.0
    assert a[0] == -1.0


@needs_torch
def test_generic_capsules(derived_no_leaks):
    c = ext.derived_generic_capsule("int64", [2, 2], versioned=True)
    info = ext.inspect(c)
    assert info["versioned"] and info["version"] == (1, 3)
    assert info["dtype"] == "int64" and info["shape"] == [2, 2]
    x = torch.from_dlpack(ext.derived_generic_capsule("float32", [5], versioned=False))
    np.testing.assert_array_equal(x.numpy(), sample("float32", (5,)))
    assert "dltensor_versioned" in repr(ext.derived_generic_capsule("bool", [1], versioned=True))
    with pytest.raises(BufferError, match="read-only"):
        ext.derived_generic_capsule("bool", [1], versioned=False)
    assert '"dltensor"' in repr(ext.derived_generic_capsule("uint8", [1], versioned=False))
    with pytest.raises(ValueError, match="no generic tensor"):
        ext.derived_generic("complex64", [1])


def test_generic_tensor_describes_itself(derived_no_leaks):
    t = ext.derived_generic("float16", [2, 3])
    assert tuple(t.shape) == (2, 3)
    assert t.dtype == "float16"
    assert tuple(t.strides) == (3, 1)
    assert t.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("case", CLASS_CASES)
def test_dlpack_device(case, derived_no_leaks):
    obj, _ = CASES[case][0]()
    assert obj.__dlpack_device__() == (1, 0)


@needs("torch", "jax")
def test_empty_and_scalar(derived_no_leaks):
    e = ext.derived_typed(b"", "float32", [0, 3])
    for consumer in ("numpy", "torch", "jax"):
        x = consume(consumer, e)[0]
        assert tuple(x.shape) == (0, 3)
    s = ext.derived_typed(np.float64(2.5).tobytes(), "float64", [])
    assert np.from_dlpack(s).shape == ()
    assert np.from_dlpack(s)[()] == 2.5
    assert torch.from_dlpack(s).item() == 2.5
    assert float(jnp.from_dlpack(s)) == 2.5
    with pytest.raises(ValueError):
        ext.derived_typed(b"\0" * 8, "float32", [3])  # does not fill the shape


# ---------------------------------------------------------------------------------------------
# Read-only


def test_read_only_numpy_gets_read_only_array(derived_no_leaks):
    r = ext.derived_read_only(5)
    a = np.from_dlpack(r)
    assert a.dtype == np.int32
    np.testing.assert_array_equal(a, np.arange(5, dtype=np.int32))
    info = ext.inspect(r)
    assert info["read_only"] and info["versioned"]
    if not NUMPY_VERSIONED:
        # numpy 2.0 asks for a legacy capsule, which cannot say read-only: a copy.
        assert a.ctypes.data != info["data_ptr"]
        return
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 1
    assert info["data_ptr"] == a.ctypes.data  # read-only is still zero copy


def test_read_only_versioned_capsule_carries_flag(derived_no_leaks):
    r = ext.derived_read_only(3)
    for mv in [(1, 0), (1, 3), (2, 0)]:
        info = ext.inspect(r.__dlpack__(max_version=mv))
        assert info["flags"] & 1  # READ_ONLY
        assert info["read_only"]


def test_read_only_legacy_request_copies_unless_copy_false(derived_no_leaks):
    r = ext.derived_read_only(3)
    shared = ext.inspect(r)["data_ptr"]
    for kwargs in ({}, {"max_version": None}, {"max_version": (0, 8)}, {"copy": None}):
        cap = r.__dlpack__(**kwargs)
        assert ext.inspect(cap)["data_ptr"] != shared
        assert ext.to_bytes(r.__dlpack__(**kwargs)) == np.arange(3, dtype=np.int32).tobytes()
    for kwargs in ({"copy": False}, {"copy": False, "max_version": (0, 8)}):
        with pytest.raises(BufferError, match="read-only"):
            r.__dlpack__(**kwargs)


@needs_jax
def test_read_only_jax_gets_a_copy(derived_no_leaks):
    # jax asks for a legacy capsule only, which cannot carry READ_ONLY: a copy (copy=None).
    r = ext.derived_read_only(3)
    a = jnp.from_dlpack(r)
    assert a.tolist() == [0, 1, 2]
    assert a.unsafe_buffer_pointer() != ext.inspect(r)["data_ptr"]


@needs_torch
def test_read_only_torch_reads_values(derived_no_leaks):
    r = ext.derived_read_only(4)
    x = torch.from_dlpack(r)  # torch asks for versioned, ignores READ_ONLY on import
    np.testing.assert_array_equal(x.numpy(), np.arange(4, dtype=np.int32))
    assert x.data_ptr() == ext.inspect(r)["data_ptr"]


