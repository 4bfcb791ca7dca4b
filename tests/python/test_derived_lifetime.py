"""`#[derive(IntoDLPack)]` from Python: the lifetime of derived values (tests/pyext/src/derived.rs).
Each derived value counts its creation and its drop (`ext.derived_counts()`): every one is
dropped exactly once, after its last consumer, whether its owner or a consumer goes first.
"""

import gc
import sys

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import (
    NUMPY_VERSIONED, collect, derived_live, jnp, needs, needs_torch, peer_param, sample, torch,
)
from derived_cases import CASES, CLASS_CASES, source_ptr


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
