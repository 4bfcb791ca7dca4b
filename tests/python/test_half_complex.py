"""half (f16, bf16) and num-complex (Complex32, Complex64) as element types: typed exports
(`Export::new(Vec<T>)`), typed views (`as_slice`, `as_mut_slice`, ndarray `as_array`) and
derived classes, with numpy, torch and jax; bf16 round trips with torch and jax."""

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import jax, needs_jax, needs_torch, torch


def expected(dtype, n):
    i = np.arange(n, dtype=np.float64)
    if dtype.startswith("complex"):
        return (i + 1j * (2 * i - 1)).astype(dtype)
    return (i * 0.25 - 1.5).astype("float32" if dtype == "bfloat16" else dtype)


NUMPY_TYPED = ["float16", "complex64", "complex128"]  # numpy has no bfloat16


@pytest.mark.parametrize("dtype", NUMPY_TYPED)
def test_typed_export_to_numpy_and_in_place_double(dtype):
    t = ext.hc_make(dtype, 7)
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(a, expected(dtype, 7))
    if np.lib.NumpyVersion(np.__version__) >= "2.1.0":
        assert ext.hc_double(a) == dtype  # typed as_mut_slice on numpy's memory ...
    else:  # numpy 2.0 imports read-only and will not export that again
        assert ext.hc_double(t) == dtype
    np.testing.assert_array_equal(a, 2 * expected(dtype, 7))  # ... which is Rust's


@pytest.mark.parametrize("dtype", NUMPY_TYPED)
def test_typed_ndarray_view_of_strided_numpy(dtype):
    a = expected(dtype, 12).reshape(3, 4)[::-1, 1::2]
    values = ext.hc_values(a)
    assert [complex(re, im) for re, im in values] == [complex(x) for x in a.ravel()]


def test_typed_view_refuses_other_dtypes():
    with pytest.raises(ValueError, match="unsupported dtype float32"):
        ext.hc_double(np.zeros(3, dtype=np.float32))


@pytest.mark.parametrize("kind,dtype,shape", [
    ("complex128", "complex128", (2, 3)),
    ("complex64", "complex64", (5,)),
])
def test_derived_complex_classes_to_numpy(kind, dtype, shape):
    obj = ext.hc_derived(kind, 5)
    a = np.from_dlpack(obj)
    assert a.dtype == np.dtype(dtype) and a.shape == shape
    np.testing.assert_array_equal(a.ravel(), expected(dtype, a.size))


def test_derived_ndarray_field_exports_its_memory():
    a = np.from_dlpack(ext.hc_derived("ndarray", 5))
    # The field is Array1 [4, 3, 2, 1, 0] (reversed view): as a buffer it is its memory span.
    np.testing.assert_array_equal(a, np.arange(5, dtype=np.float32))


# ---- torch ----

TORCH_TYPED = ["float16", "bfloat16", "complex64", "complex128"]


@needs_torch
@pytest.mark.parametrize("dtype", TORCH_TYPED)
def test_typed_export_to_torch_and_back(dtype):
    t = ext.hc_make(dtype, 6)
    x = torch.from_dlpack(t)
    assert x.dtype == getattr(torch, dtype)
    ref = torch.from_numpy(expected(dtype, 6)).to(getattr(torch, dtype))
    assert torch.equal(x, ref)
    ext.hc_double(x)  # Rust writes through torch's view of Rust memory
    assert torch.equal(torch.from_dlpack(t), ref * 2)
    back = [complex(re, im) for re, im in ext.hc_values(x.flip(0).clone()[::2])]
    assert back == [complex(v) for v in (ref * 2).flip(0)[::2].tolist()]


@needs_torch
def test_bf16_round_trip_with_torch():
    x = (torch.arange(24, dtype=torch.float32) * 0.375 - 4).to(torch.bfloat16).reshape(2, 3, 4)
    y = torch.from_dlpack(ext.hc_bf16_copy(x))  # torch -> Vec<bf16> -> torch
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    assert torch.equal(x, y)
    assert y.data_ptr() != x.data_ptr()  # a real copy in Rust
    d = torch.from_dlpack(ext.hc_derived("bfloat16", 9))
    assert torch.equal(d, torch.from_numpy(expected("bfloat16", 9)).to(torch.bfloat16))


# ---- jax ----


@needs_jax
def test_bf16_round_trip_with_jax():
    jnp = jax.numpy
    x = (jnp.arange(12, dtype=jnp.float32) * 0.375 - 2).astype(jnp.bfloat16).reshape(3, 4)
    assert [re for re, _ in ext.hc_values(x)] == np.asarray(x.astype(jnp.float32)).ravel().tolist()
    y = jnp.from_dlpack(ext.hc_bf16_copy(x))  # jax -> Vec<bf16> -> jax
    assert y.dtype == jnp.bfloat16 and y.shape == (3, 4)
    assert bool((x == y).all())
    z = jnp.from_dlpack(ext.hc_make("bfloat16", 8))
    np.testing.assert_array_equal(np.asarray(z.astype(jnp.float32)), expected("bfloat16", 8))
    d = jnp.from_dlpack(ext.hc_derived("bfloat16", 4))
    np.testing.assert_array_equal(np.asarray(d.astype(jnp.float32)), expected("bfloat16", 4))


@needs_jax
@pytest.mark.parametrize("dtype", ["float16", "complex64"])
def test_jax_typed_exports(dtype):
    z = jax.numpy.from_dlpack(ext.hc_make(dtype, 5))
    assert z.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(z), expected(dtype, 5))
