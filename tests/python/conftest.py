"""Shared helpers for the dlpack-rs interop suite.

The extension module `dlpack_testext` (tests/pyext) must be installed in the running
environment (`maturin develop -m tests/pyext/Cargo.toml`).
"""

import gc
import importlib
import pathlib
import sys

import numpy as np
import pytest

import dlpack_testext as ext

# This crate's borrow table (rust-numpy's `_RUST_NUMPY_BORROW_CHECKING_API`) is the process's,
# made by its first import of a numpy array, before any rust-numpy function of the test
# extension could make rust-numpy's own: every test process (each pytest-xdist worker too)
# then runs with the same table, whichever test files it gets. Tests of rust-numpy's own table
# run in fresh interpreters (test_rust_numpy.py).
ext.numel(np.zeros(1, np.float32))


# numpy 2.1 and newer speak DLPack 1.x (max_version, copy and dl_device, versioned capsules
# with READ_ONLY). numpy 2.0, the last for Python 3.9, only legacy capsules both ways: its
# imports are read-only, it cannot export a read-only array, and it refuses a read-only export.
NUMPY_VERSIONED = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


def optional_import(name):
    """The module `name`, or None when it is not installed.

    Only ImportError means "missing": any other error of a broken install propagates.
    """
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# The peers: every module imports them from here, each None where it is missing (the abi3
# matrix's venvs have numpy and pytest only). Tests that need one carry `needs(...)`, and skip
# with the reason "needs <peer>" where it is missing; apart from "needs numpy >= 2.1" and "needs
# version tags" (below) nothing else skips, and tests/abi3-matrix.sh checks that.
torch = optional_import("torch")
jax = optional_import("jax")
if jax is not None:  # JAX truncates 64-bit types unless x64 is enabled; enable it before any use.
    jax.config.update("jax_enable_x64", True)
jnp = optional_import("jax.numpy") if jax is not None else None
pa = optional_import("pyarrow")
xp = optional_import("array_api_strict")
st = optional_import("safetensors")

PEERS = {"torch": torch, "jax": jax, "pyarrow": pa, "array_api_strict": xp, "safetensors": st}
MISSING = [name for name, module in PEERS.items() if module is None]


def needs(*peers):
    """A skip mark for a test (or one parameter) that needs all of `peers`: it skips with
    "needs <peer>", naming the first one missing, and runs where all are installed."""
    for peer in peers:
        if peer not in PEERS:
            raise ValueError(f"unknown peer {peer!r}")
    missing = [peer for peer in peers if PEERS[peer] is None]
    return pytest.mark.skipif(bool(missing), reason="needs " + (missing[0] if missing else "-"))


needs_torch = needs("torch")
needs_jax = needs("jax")
needs_pyarrow = needs("pyarrow")
needs_array_api_strict = needs("array_api_strict")
needs_safetensors = needs("safetensors")
# For a test whose subject numpy 2.0 cannot take part in at all (a writable import of numpy
# memory, numpy reading a read-only export); where numpy 2.0 merely answers differently, the
# test asserts its answer instead.
needs_numpy_versioned = pytest.mark.skipif(not NUMPY_VERSIONED, reason="needs numpy >= 2.1")
# For a test of what only CPython's type version tags let the crate see (a class changed after
# its first import): not in abi3 builds (the tag is hidden) nor before CPython 3.11.
_ABI3 = any(p.name.endswith(".abi3.so") for p in pathlib.Path(ext.__file__).parent.glob("*.so"))
needs_version_tags = pytest.mark.skipif(
    _ABI3 or sys.version_info < (3, 11), reason="needs version tags (not abi3, CPython >= 3.11)"
)


def peer_param(*values, peers=None, **kw):
    """`pytest.param(*values)`, marked with `needs` for every value that names a peer
    ("torch", "jax", ...; "numpy" and "rust" need nothing), or for `peers` when given."""
    if peers is None:
        peers = [v for v in values if isinstance(v, str) and v in PEERS]
    marks = [needs(*peers)] if peers else []
    return pytest.param(*values, marks=marks, **kw)


def by_peer(values):
    """Parameter values, each one naming a peer marked as `peer_param` does."""
    return [peer_param(v) for v in values]

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


def pytest_collection_finish(session):
    """No Rust storage may outlive collection (a parametrize value made at import time).

    One that did would keep `live()` above zero for the whole session, and every `no_leaks`
    test would then pay three full collections (about half a second with torch and jax loaded):
    that made the suite several minutes slower. Make such values when their test runs.
    """
    if live() != 0:
        collect()
    if live() != 0:
        raise pytest.UsageError(
            "%d Rust storages are live after collection: a test module made one at import time "
            "(make it when its test runs)" % live())
    # Everything alive now (the peers' modules, caches and types: about a million objects with
    # torch and jax) is alive for the whole session: moved out of the collector's view, a full
    # collection takes microseconds instead of about 120 ms, and the suite's leak checks stop
    # paying for torch and jax. What the tests make is still collected as before.
    gc.collect()
    gc.freeze()


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


# Values of the derived classes (tests/pyext/src/derived.rs) count their creations and drops
# on their own (`ext.derived_counts()`), apart from the Rust storages `live` counts.
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


def refcount(obj):
    return sys.getrefcount(obj)



class DlpackOnlyProducer:
    """A Python producer in front of a Rust export (`dlpack_rs.Tensor`) with `__dlpack__` and
    no `__dlpack_device__`: records the keyword arguments of every `__dlpack__` call and the
    name of the capsule each call returned.

    `legacy=True` answers as a pre-1.0 producer does, whose `__dlpack__` takes `stream` only:
    any other keyword is a TypeError.
    """

    def __init__(self, tensor, legacy=False):
        self.tensor = tensor
        self.legacy = legacy
        self.calls = []
        self.capsules = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if self.legacy and set(kwargs) - {"stream"}:
            raise TypeError("__dlpack__() got an unexpected keyword argument")
        capsule = self.tensor.__dlpack__(**kwargs)
        self.capsules.append(repr(capsule).split('"')[1])  # '<capsule object "NAME" at ...>'
        return capsule


class RecordingProducer(DlpackOnlyProducer):
    """`DlpackOnlyProducer` with `__dlpack_device__`: the whole protocol."""

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()
