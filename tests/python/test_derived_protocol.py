"""`#[derive(IntoDLPack)]` from Python: the `__dlpack__` keyword protocol of the derived classes
(tests/pyext/src/derived.rs), and their being frozen (no attribute can be set or deleted).
"""

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import NUMPY_VERSIONED, collect, jnp, needs, torch
from derived_cases import CASES, CLASS_CASES, source_ptr


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

