"""`#[derive(IntoDLPack)]` from Python: derived classes consumed by numpy, torch and jax.

The classes live in tests/pyext/src/derived.rs. Each derived value counts its creation and its
drop (`ext.derived_counts()`), so the suite checks that every one is dropped exactly once, after
its last consumer.
"""

import ctypes
import gc
import sys

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import (
    NUMPY_DTYPES, NUMPY_VERSIONED, by_peer, collect, jnp, needs, needs_jax, needs_numpy_versioned,
    needs_torch, peer_param, sample, torch,
)

GENERIC_DTYPES = ["uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]
ALIGNED_KINDS = {"typed", "signal", "generic"}  # a 64-byte aligned user Buffer as data


def derived_live():
    created, dropped = ext.derived_counts()
    assert dropped <= created  # nothing is dropped twice
    return created - dropped


@pytest.fixture
def derived_no_leaks():
    """Every derived value created in the test is dropped exactly once by its end."""
    if derived_live() != 0:
        collect()
    before = derived_live()
    yield
    if derived_live() != before:
        collect()
    assert derived_live() == before


# ---------------------------------------------------------------------------------------------
# The cases: name -> (make() -> (object, expected numpy array, dtype name), kind)


def _image():
    return ext.derived_image(2, 3, 4), (np.arange(24) % 256).astype(np.uint8).reshape(2, 3, 4)


def _vector():
    v = [0.5, -1.25, 3.0, 7.75, -0.0]
    return ext.derived_vector(v), np.array(v, dtype=np.float32)


def _transposed():
    return ext.derived_transposed(2, 3), np.arange(6, dtype=np.float32).reshape(2, 3).T


def _window():
    return ext.derived_window(10, 3, 4), np.arange(3, 7, dtype=np.float64)


def _signal():
    v = sample("float64", (2, 3))
    return ext.DerivedSignal(v.ravel().tolist(), [2, 3]), v


def _typed(dtype, shape=(2, 3)):
    def make():
        a = np.ascontiguousarray(sample(dtype, shape))
        return ext.derived_typed(a.tobytes(), dtype, list(shape)), a

    return make


def _generic(dtype, shape=(3, 4)):
    def make():
        return ext.derived_generic(dtype, list(shape)), sample(dtype, shape)

    return make


CASES = {
    "image": (_image, "uint8", "image"),
    "vector": (_vector, "float32", "vector"),
    "transposed": (_transposed, "float32", "transposed"),
    "window": (_window, "float64", "window"),
    "signal": (_signal, "float64", "signal"),
    **{f"typed-{d}": (_typed(d), d, "typed") for d in NUMPY_DTYPES + ["bfloat16"]},
    **{f"generic-{d}": (_generic(d), d, "generic") for d in GENERIC_DTYPES},
}
# Classes whose `__dlpack__` comes from the derive or the one-line delegation (not the
# ready-made `dlpack_rs.Tensor` the generic struct is moved into).
CLASS_CASES = ["image", "vector", "transposed", "window", "signal", "typed-float32"]


def element_strides(a):
    return tuple(s // a.itemsize for s in a.strides)


def source_ptr(obj):
    """Address of the first element, as our own importer sees the export (no copy)."""
    return ext.inspect(obj)["data_ptr"]


def to_numpy(x, dtype):
    """The values of a torch tensor or jax array as numpy (bfloat16 as uint16 bits)."""
    if torch is not None and isinstance(x, torch.Tensor):
        if dtype == "bfloat16":
            return x.view(torch.int16).numpy().view(np.uint16)
        return x.numpy()
    a = np.asarray(x)
    return a.view(np.uint16) if dtype == "bfloat16" else a


def consume(consumer, obj):
    """(consumer's array, its first-element address, its element strides, its dtype name)."""
    if consumer == "numpy":
        a = np.from_dlpack(obj)
        return a, a.ctypes.data, element_strides(a), a.dtype.name
    if consumer == "torch":
        x = torch.from_dlpack(obj)
        return x, x.data_ptr(), tuple(x.stride()), str(x.dtype).removeprefix("torch.")
    j = jnp.from_dlpack(obj)
    return j, j.unsafe_buffer_pointer(), None, j.dtype.name


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


# ---------------------------------------------------------------------------------------------
# The __dlpack__ keyword protocol on derived classes


def capsule_name(capsule):
    return repr(capsule).split('"')[1]


@pytest.mark.parametrize("case", CLASS_CASES)
@pytest.mark.parametrize(
    "max_version,name",
    [(None, "dltensor"), ((1, 0), "dltensor_versioned"), ((1, 3), "dltensor_versioned"),
     ((2, 0), "dltensor_versioned")],
    ids=str,
)
def test_max_version(case, max_version, name, derived_no_leaks):
    obj, expected = CASES[case][0]()
    cap = obj.__dlpack__(max_version=max_version)
    assert capsule_name(cap) == name
    info = ext.inspect(cap)
    assert info["versioned"] == (name == "dltensor_versioned")
    if info["versioned"]:
        assert info["version"] == (1, 3)  # our own version, whatever the consumer's maximum
    assert tuple(info["shape"]) == expected.shape
    assert info["data_ptr"] == source_ptr(obj)
    assert not info["copied"]


@pytest.mark.parametrize("case", CLASS_CASES)
def test_copy_true_gives_a_copy(case, derived_no_leaks):
    make, dtype, _ = CASES[case]
    obj, expected = make()
    ptr = source_ptr(obj)
    info = ext.inspect(obj.__dlpack__(max_version=(1, 3), copy=True))
    assert info["copied"]
    assert info["data_ptr"] != ptr
    if not NUMPY_VERSIONED:  # numpy 2.0's from_dlpack takes no `copy`
        with pytest.raises(TypeError):
            np.from_dlpack(obj, copy=True)
        return
    a = np.from_dlpack(obj, copy=True)
    assert a.ctypes.data != ptr
    np.testing.assert_array_equal(a, expected)
    a[(0,) * a.ndim] = 42
    assert np.from_dlpack(obj)[(0,) * a.ndim] == expected[(0,) * a.ndim]  # source unchanged


@pytest.mark.parametrize("case", CLASS_CASES)
def test_copy_false_and_none_are_zero_copy(case, derived_no_leaks):
    obj, _ = CASES[case][0]()
    ptr = source_ptr(obj)
    assert ext.inspect(obj.__dlpack__(max_version=(1, 0), copy=False))["data_ptr"] == ptr
    assert ext.inspect(obj.__dlpack__(max_version=(1, 0), copy=None))["data_ptr"] == ptr
    if NUMPY_VERSIONED:
        assert np.from_dlpack(obj, copy=False).ctypes.data == ptr
    else:  # numpy 2.0's from_dlpack takes no `copy`
        with pytest.raises(TypeError):
            np.from_dlpack(obj, copy=False)


@pytest.mark.parametrize("case", CLASS_CASES)
def test_dl_device(case, derived_no_leaks):
    obj, expected = CASES[case][0]()
    info = ext.inspect(obj.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))
    assert info["device"] == (1, 0)
    assert info["data_ptr"] == source_ptr(obj)
    if NUMPY_VERSIONED:
        np.testing.assert_array_equal(np.from_dlpack(obj, device="cpu"), expected)
    else:  # numpy 2.0's from_dlpack takes no `device`
        with pytest.raises(TypeError):
            np.from_dlpack(obj, device="cpu")
    for device in [(2, 0), (13, 0), (10, 0), (4, 1)]:  # CUDA, CUDA managed, ROCm, OpenCL
        with pytest.raises(BufferError):
            obj.__dlpack__(max_version=(1, 3), dl_device=device)
        with pytest.raises(BufferError):
            obj.__dlpack__(dl_device=device)


@pytest.mark.parametrize("case", CLASS_CASES)
@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"max_version": 1}, TypeError),
        ({"max_version": (1,)}, TypeError),
        ({"max_version": (1, 0, 0)}, TypeError),
        ({"max_version": "1.0"}, TypeError),
        ({"max_version": (1, -1)}, ValueError),
        ({"dl_device": 1}, TypeError),
        ({"dl_device": ("cpu", 0)}, TypeError),
        ({"copy": 1}, ValueError),
        ({"copy": "yes"}, ValueError),
        ({"stream": "default"}, TypeError),
        ({"stream": 1}, ValueError),  # CPU data: only stream=None
        ({"unknown": 1}, TypeError),
    ],
    ids=str,
)
def test_bad_arguments(case, kwargs, error, derived_no_leaks):
    obj, _ = CASES[case][0]()
    with pytest.raises(error):
        obj.__dlpack__(**kwargs)


@pytest.mark.parametrize("case", CLASS_CASES)
def test_keyword_only(case, derived_no_leaks):
    obj, _ = CASES[case][0]()
    with pytest.raises(TypeError):
        obj.__dlpack__(None)
    with pytest.raises(TypeError):
        obj.__dlpack_device__(1)


# ---------------------------------------------------------------------------------------------
# Mutation safety: the classes are frozen


@pytest.mark.parametrize(
    "case,attr",
    [("image", "pixels"), ("image", "shape"), ("vector", "0"), ("transposed", "strides"),
     ("window", "offset"), ("typed-int16", "dtype"), ("signal", "values"),
     ("signal", "shape"), ("signal", "samples")],
)
def test_attributes_cannot_be_set(case, attr, derived_no_leaks):
    obj, expected = CASES[case][0]()
    a = np.from_dlpack(obj)
    with pytest.raises(AttributeError):
        setattr(obj, attr, [1])
    with pytest.raises(AttributeError):
        delattr(obj, attr)
    np.testing.assert_array_equal(a, expected)
    assert np.from_dlpack(obj).ctypes.data == a.ctypes.data


@needs("torch", "jax")
def test_replacing_data_returns_new_object(derived_no_leaks):
    s = ext.DerivedSignal([1.0, 2.0, 3.0])
    a = np.from_dlpack(s)
    j = jnp.from_dlpack(s)
    x = torch.from_dlpack(s)
    s2 = s.with_value(1, 20.0)
    assert s2 is not s
    assert s2.values == [1.0, 20.0, 3.0]
    assert s2.data_ptr != s.data_ptr
    # The existing consumers keep valid, unchanged data, still Rust's buffer of `s`.
    assert s.values == [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(a, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(j), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])
    assert a.ctypes.data == s.data_ptr == x.data_ptr() == j.unsafe_buffer_pointer()
    np.testing.assert_array_equal(np.from_dlpack(s2), [1.0, 20.0, 3.0])
    del s
    collect()
    np.testing.assert_array_equal(a, [1.0, 2.0, 3.0])
    with pytest.raises(IndexError):
        s2.with_value(3, 0.0)


def test_signal_constructor_checks_shape(derived_no_leaks):
    with pytest.raises(ValueError):
        ext.DerivedSignal([1.0, 2.0, 3.0], [2, 2])
    with pytest.raises(ValueError):
        ext.DerivedSignal([1.0], [-1])
    s = ext.DerivedSignal([1.0, 2.0, 3.0, 4.0], [2, 2])
    assert s.shape == [2, 2]
    assert np.from_dlpack(s).shape == (2, 2)


# ---------------------------------------------------------------------------------------------
# Lifetime: drop counts, owner deleted first, refcounts


def make_consumer(consumer, obj):
    if consumer == "numpy":
        c = np.from_dlpack(obj)
        return c, lambda: np.asarray(c).copy()
    if consumer == "torch":
        c = torch.from_dlpack(obj)
        return c, lambda: c.numpy().copy()
    if consumer == "jax":
        c = jnp.from_dlpack(obj)
        return c, lambda: np.asarray(c).copy()
    c = ext.hold(obj)
    return c, None


@pytest.mark.parametrize(
    "case,consumer",
    [peer_param(case, consumer) for case in CLASS_CASES + ["generic-float32", "read_only"]
     for consumer in ["numpy", "torch", "jax", "rust"]
     if (case, consumer) != ("read_only", "jax")],  # jax refuses read-only (tested above)
)
def test_owner_deleted_first_then_consumer_reads(case, consumer, derived_no_leaks):
    if case == "read_only":
        obj, expected = ext.derived_read_only(6), np.arange(6, dtype=np.int32)
    else:
        obj, expected = CASES[case][0]()
    if (case, consumer) == ("read_only", "numpy") and not NUMPY_VERSIONED:
        # numpy 2.0 asks for a legacy capsule, which cannot say read-only: it gets a copy, which
        # holds nothing of ours.
        np.testing.assert_array_equal(np.from_dlpack(obj), expected)
        return
    before = derived_live()
    # JAX copies memory that is not 64-byte aligned and then holds no reference to our object.
    held = consumer != "jax" or source_ptr(obj) % 64 == 0
    c, read = make_consumer(consumer, obj)
    del obj
    collect()
    if held:
        assert derived_live() == before  # the consumer keeps the Rust value alive
    else:
        assert derived_live() == before - 1  # a copy: the Rust value is already gone
    if read is None:
        got = np.frombuffer(c.to_bytes(), expected.dtype).reshape(expected.shape)
    else:
        got = read()
    np.testing.assert_array_equal(got, expected)
    # Memory that was freed and reused would not hold these values; churn the allocator.
    junk = [np.full(expected.size + 7, 123, dtype=np.float64) for _ in range(50)]
    del junk
    np.testing.assert_array_equal(got if read is None else read(), expected)
    del c, read
    collect()
    assert derived_live() == before - 1  # dropped exactly once


@needs("torch", "jax")
def test_each_value_dropped_exactly_once_after_all_consumers(derived_no_leaks):
    created0, dropped0 = ext.derived_counts()
    objs = [CASES[c][0]()[0] for c in CLASS_CASES] + [ext.derived_read_only(4)]
    assert ext.derived_counts() == (created0 + len(objs), dropped0)
    per_object = []
    for o in objs:
        cs = [np.from_dlpack(o), torch.from_dlpack(o), ext.hold(o)]
        if not isinstance(o, ext.DerivedReadOnly):
            cs.append(jnp.from_dlpack(o))
        for _ in range(3):
            o.__dlpack__(max_version=(1, 3))  # unconsumed capsules: their destructors release
        per_object.append(cs)
    n = len(objs)
    del objs, o, cs
    collect()
    assert ext.derived_counts() == (created0 + n, dropped0)  # consumers keep all alive
    for k, cs in enumerate(per_object):
        while len(cs) > 1:
            cs.pop()
            collect()
            assert ext.derived_counts() == (created0 + n, dropped0 + k)
        cs.pop()  # the last consumer of this value
        collect()
        assert ext.derived_counts() == (created0 + n, dropped0 + k + 1)
    collect()
    assert ext.derived_counts() == (created0 + n, dropped0 + n)  # and never again


@needs_torch
def test_generic_dropped_by_deleter(derived_no_leaks):
    before = derived_live()
    t = ext.derived_generic("int64", [4])
    assert derived_live() == before + 1
    x = torch.from_dlpack(t)
    del t
    collect()
    assert derived_live() == before + 1  # torch's tensor holds the dlpack_rs.Tensor
    np.testing.assert_array_equal(x.numpy(), sample("int64", (4,)))
    del x
    collect()
    assert derived_live() == before
    # An unconsumed capsule drops its value in the capsule destructor.
    c = ext.derived_generic_capsule("uint8", [3], versioned=True)
    assert derived_live() == before + 1
    del c
    assert derived_live() == before
    c = ext.derived_generic_capsule("uint8", [3], versioned=False)
    del c
    assert derived_live() == before


@needs("torch", "jax")
@pytest.mark.parametrize("case", CLASS_CASES + ["read_only"])
def test_refcount_returns(case, derived_no_leaks):
    obj = ext.derived_read_only(3) if case == "read_only" else CASES[case][0]()[0]
    start = sys.getrefcount(obj)
    consumers = [np.from_dlpack(obj), torch.from_dlpack(obj), ext.hold(obj)]
    if case != "read_only":
        consumers.append(jnp.from_dlpack(obj))
    assert sys.getrefcount(obj) >= start + 3  # each export holds the Python object
    del consumers
    collect()
    assert sys.getrefcount(obj) == start
    for _ in range(5):
        obj.__dlpack__(max_version=(1, 3))
        if case != "read_only":
            obj.__dlpack__()
    assert sys.getrefcount(obj) == start
    for _ in range(5):
        with pytest.raises(BufferError):
            obj.__dlpack__(max_version=(1, 3), dl_device=(2, 0))
    assert sys.getrefcount(obj) == start  # failed exports release it too


@needs_torch
def test_consumers_released_without_gc(derived_no_leaks):
    """Plain reference counting frees a derived value once numpy and torch are done."""
    gc.disable()
    try:
        before = derived_live()
        img = ext.derived_image(4, 4, 1)
        a = np.from_dlpack(img)
        x = torch.from_dlpack(img)
        del img
        assert derived_live() == before + 1
        del a
        assert derived_live() == before + 1
        del x
        assert derived_live() == before
    finally:
        gc.enable()
