"""Shared helpers for the dlpack-rs interop suite.

The extension module `dlpack_testext` (tests/pyext) must be installed in the running
environment (`maturin develop -m tests/pyext/Cargo.toml`).
"""

import gc
import sys

import numpy as np
import pytest

import dlpack_testext as ext

try:  # JAX truncates 64-bit types unless x64 is enabled; enable it before any use.
    import jax

    jax.config.update("jax_enable_x64", True)
except ImportError:  # pragma: no cover - the suite installs jax
    jax = None

NUMPY_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]
TORCH_DTYPES = NUMPY_DTYPES + ["bfloat16"]
JAX_DTYPES = NUMPY_DTYPES + ["bfloat16"]
PYARROW_DTYPES = [
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
]
SHAPES = [(), (0,), (3, 0), (5,), (2, 3, 4), (1,) * 32]


def sample(dtype, shape):
    """A numpy array of `dtype` and `shape` with distinct, non-trivial values.

    bfloat16 (which numpy lacks) is returned as its uint16 bit patterns.
    """
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "bool":
        return (np.arange(n) % 3 == 1).reshape(shape)
    if dtype == "bfloat16":
        f = (np.arange(n, dtype=np.float32) * 0.5 - 3.0).reshape(shape)
        return np.asarray(f.view(np.uint32) >> 16).astype(np.uint16)
    if dtype.startswith("complex"):
        v = np.arange(n) + 1j * (np.arange(n) * 2 - 1)
        return v.astype(dtype).reshape(shape)
    if dtype.startswith("uint"):
        return (np.arange(n) * 7 + 3).astype(dtype).reshape(shape)
    if dtype.startswith("int"):
        return (np.arange(n) * 7 - 11).astype(dtype).reshape(shape)
    return (np.arange(n) * 0.25 - 1.5).astype(dtype).reshape(shape)


def rust_tensor(dtype, shape, kind="ready", **kw):
    """A Rust-owned tensor holding `sample(dtype, shape)`; returns (tensor, expected)."""
    a = np.ascontiguousarray(sample(dtype, shape))
    if kind == "ready":
        t = ext.make_tensor(a.tobytes(), dtype, list(shape), **kw)
    else:
        t = ext.RustTensor(a.tobytes(), dtype, list(shape), **kw)
    return t, a


def collect():
    for _ in range(3):
        gc.collect()


def live():
    """Rust storages created and not yet dropped."""
    created, dropped = ext.counters()
    return created - dropped


@pytest.fixture
def no_leaks():
    """Asserts that every Rust storage created in the test was dropped exactly once by the end.

    Garbage collection is slow with torch and jax loaded, so it only runs when reference
    counting alone has not released everything.
    """
    if live() != 0:
        collect()
    before = live()
    yield
    if live() != before:
        collect()
    assert live() == before


def refcount(obj):
    return sys.getrefcount(obj)
