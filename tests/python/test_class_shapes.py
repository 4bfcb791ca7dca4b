"""The derive's three class shapes with real consumers (tests/pyext/src/shapes.rs, derived.rs):

- frozen with its own methods (`#[dlpack_rs::pymethods]` on a block with `#[new]`):
  `DerivedSignal`;
- mutable with shared data (`Arc<[f32]>`: `MutableFrame`; `ArcArray2`: `MutableMatrix`): each
  export holds its own reference, so `&mut self` methods cannot free what a consumer reads;
- a plain Rust struct (no pyclass) in a build with pyo3 on: `plain_capsule`.

And zero copy to jax: the library's `AlignedBuffer` is shared, a `Vec` is copied unless it
happens to be 64-byte aligned.
"""

import sys

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import NUMPY_VERSIONED, collect, jnp, needs_jax, needs_numpy_versioned, needs_torch, torch


def live():
    created, dropped = ext.derived_counts()
    return created - dropped


@pytest.fixture
def no_leaks():
    collect()
    before = live()
    yield
    collect()
    assert live() == before


def numpy_view(obj):
    a = np.from_dlpack(obj)
    return a, a.ctypes.data


def torch_view(obj):
    x = torch.from_dlpack(obj)
    return x, x.data_ptr()


MUTABLE = {
    "arc": (lambda: ext.MutableFrame(2, 3), np.arange(6, dtype=np.float32).reshape(2, 3)),
    "arcarray": (lambda: ext.MutableMatrix(2, 3), np.arange(6, dtype=np.float64).reshape(2, 3)),
}


# ---------------------------------------------------------------------------------------------
# Frozen class with its own methods


def test_frozen_with_own_methods_constructor_and_protocol(no_leaks):
    s = ext.DerivedSignal([1.0, 2.0, 3.0, 4.0], [2, 2])
    assert s.shape == [2, 2]  # its own getter
    assert s.__dlpack_device__() == (1, 0)  # added by the attribute
    assert hasattr(type(s), "__dlpack_c_exchange_api__")
    a = np.from_dlpack(s)
    assert a.ctypes.data == s.data_ptr
    assert a.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    start = sys.getrefcount(s)
    held = [np.from_dlpack(s), ext.hold(s)]
    assert sys.getrefcount(s) == start + 2  # the frozen route holds the object
    del held
    collect()
    assert sys.getrefcount(s) == start


@needs_torch
def test_frozen_with_own_methods_torch(no_leaks):
    s = ext.DerivedSignal([1.0, 2.0, 3.0])
    x, ptr = torch_view(s)
    assert ptr == s.data_ptr
    x[0] = 10.0
    assert s.values == [10.0, 2.0, 3.0]


@needs_jax
def test_frozen_with_own_methods_jax(no_leaks):
    s = ext.DerivedSignal([1.0, 2.0, 3.0, 4.0])
    j = jnp.from_dlpack(s)
    assert j.unsafe_buffer_pointer() == s.data_ptr
    assert np.asarray(j).tolist() == [1.0, 2.0, 3.0, 4.0]


# ---------------------------------------------------------------------------------------------
# Mutable classes with shared data


@needs_numpy_versioned
@pytest.mark.parametrize("kind", MUTABLE)
def test_mutable_constructor_and_numpy_shares_read_only(kind, no_leaks):
    make, expected = MUTABLE[kind]
    m = make()
    a, ptr = numpy_view(m)
    assert ptr == m.data_ptr
    np.testing.assert_array_equal(a, expected)
    # Shared data is never written by its owners, so consumers get it read-only.
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0, 0] = 1


@needs_numpy_versioned
@pytest.mark.parametrize("kind", MUTABLE)
def test_mutating_method_leaves_consumer_data_intact(kind, no_leaks):
    make, expected = MUTABLE[kind]
    m = make()
    a, ptr = numpy_view(m)
    if kind == "arc":
        m.fill(9.0)
        new = [9.0] * 6
    else:
        m.add(100.0)
        new = (expected + 100.0).ravel().tolist()
    assert m.values == new
    assert m.data_ptr != ptr  # new memory for the object, the old one kept for `a`
    np.testing.assert_array_equal(a, expected)
    b, ptr_b = numpy_view(m)
    assert ptr_b == m.data_ptr and b.ravel().tolist() == new


@needs_numpy_versioned
@pytest.mark.parametrize("kind", MUTABLE)
def test_mutable_object_can_die_before_consumer(kind, no_leaks):
    make, expected = MUTABLE[kind]
    m = make()
    a, _ = numpy_view(m)
    del m
    collect()
    np.testing.assert_array_equal(a, expected)


@needs_numpy_versioned
def test_copy_on_write_only_while_exported(no_leaks):
    m = ext.MutableFrame(1, 4)
    ptr = m.data_ptr
    assert m.scale(2.0) is True and m.data_ptr == ptr  # nobody else holds it: in place
    a, _ = numpy_view(m)
    assert m.scale(2.0) is False and m.data_ptr != ptr  # `a` holds it: new pixels
    assert a.tolist() == [[0.0, 2.0, 4.0, 6.0]]
    assert m.values == [0.0, 4.0, 8.0, 12.0]
    del a
    collect()
    ptr = m.data_ptr
    assert m.scale(0.5) is True and m.data_ptr == ptr


@needs_numpy_versioned
@pytest.mark.parametrize("kind", MUTABLE)
def test_mutable_export_holds_data_not_object(kind, no_leaks):
    make, _ = MUTABLE[kind]
    m = make()
    start = sys.getrefcount(m)
    held = [np.from_dlpack(m), ext.hold(m), m.__dlpack__(max_version=(1, 3))]
    assert sys.getrefcount(m) == start  # the exports own a clone of the data, not `m`
    del held
    collect()
    assert sys.getrefcount(m) == start


@needs_numpy_versioned
def test_mutable_reshape_changes_next_export_only(no_leaks):
    m = ext.MutableFrame(2, 3)
    a = np.from_dlpack(m)
    m.reshape(3, 2)
    assert a.shape == (2, 3)
    assert np.from_dlpack(m).shape == (3, 2)


@pytest.mark.parametrize("kind", MUTABLE)
def test_mutable_legacy_export_copies_or_is_refused(kind, no_leaks):
    make, expected = MUTABLE[kind]
    m = make()
    # A legacy capsule cannot say "read-only": a copy when copy=None (what jax asks for)...
    assert ext.inspect(m.__dlpack__())["data_ptr"] != m.data_ptr
    assert ext.to_bytes(m.__dlpack__()) == expected.tobytes()
    # ...and refused when the consumer forbids copies.
    with pytest.raises(BufferError, match="read-only"):
        m.__dlpack__(copy=False)


@pytest.mark.parametrize("kind", MUTABLE)
def test_mutable_import_through_exchange_table(kind, no_leaks):
    make, expected = MUTABLE[kind]
    m = make()
    assert hasattr(type(m), "__dlpack_c_exchange_api__")
    info = ext.inspect(m)
    assert info["data_ptr"] == m.data_ptr
    assert info["read_only"] is True


@needs_torch
@pytest.mark.parametrize("kind", MUTABLE)
def test_mutable_torch_shares_and_survives_mutation(kind, no_leaks):
    make, expected = MUTABLE[kind]
    m = make()
    x, ptr = torch_view(m)
    assert ptr == m.data_ptr
    if kind == "arc":
        m.fill(-1.0)
    else:
        m.add(-1.0)
    np.testing.assert_array_equal(x.numpy(), expected)


@needs_torch
def test_torch_writes_a_read_only_export_in_place_unless_it_copies(no_leaks):
    # torch cannot represent read-only tensors: its own kernels write a READ_ONLY export in
    # place, and the class reads what torch wrote (SAFETY.md). The consumer's
    # copy=True, or a frozen class's writable export, are the documented choices.
    m = ext.MutableFrame(1, 3)
    c = torch.from_dlpack(m, copy=True)
    c.add_(1)
    assert m.values == [0.0, 1.0, 2.0]
    assert c.data_ptr() != m.data_ptr
    t = torch.from_dlpack(m)
    assert t.data_ptr() == m.data_ptr
    t.add_(1)
    assert m.values == [1.0, 2.0, 3.0]
    # This crate's own mutable views stay refused meanwhile.
    with pytest.raises(BufferError, match="already borrowed"):
        ext.add_one(t)


@needs_jax
@pytest.mark.parametrize("kind", MUTABLE)
def test_mutable_jax_gets_a_copy(kind, no_leaks):
    # jax takes legacy capsules only, which cannot say "read-only": a copy (copy=None).
    make, expected = MUTABLE[kind]
    m = make()
    a = jnp.from_dlpack(m)
    np.testing.assert_array_equal(np.asarray(a), expected)
    assert a.unsafe_buffer_pointer() != m.data_ptr


# ---------------------------------------------------------------------------------------------
# Plain Rust struct, pyo3 on


def test_plain_struct_exports(no_leaks):
    cap = ext.plain_capsule()
    assert type(cap).__name__ == "PyCapsule"
    info = ext.inspect(cap)
    assert info["shape"] == [2, 3]
    assert ext.to_bytes(ext.plain_capsule()) == np.arange(6, dtype=np.int32).tobytes()


# ---------------------------------------------------------------------------------------------
# Zero copy to jax


@needs_jax
def test_aligned_buffer_shared_with_jax(no_leaks):
    v = ext.aligned_vector([1.0, 2.0, 3.0, 4.0, 5.0])
    ptr = ext.aligned_vector_ptr(v)
    assert ptr % 64 == 0
    j = jnp.from_dlpack(v)
    assert j.unsafe_buffer_pointer() == ptr
    a = np.from_dlpack(v)
    a[1] = 20.0
    assert np.asarray(j)[1] == 20.0


@needs_jax
def test_vec_not_aligned_is_copied_by_jax(no_leaks):
    # A `Vec<f32>` is only 4-byte aligned; find one that is not 64-byte aligned (almost every
    # allocation) and check that jax copied it, as the export guide says.
    keep = []
    for _ in range(64):
        v = ext.derived_vector([1.0, 2.0, 3.0])
        if ext.inspect(v)["data_ptr"] % 64:
            break
        keep.append(v)
    else:
        pytest.fail("64 Vec allocations in a row were 64-byte aligned")
    ptr = ext.inspect(v)["data_ptr"]
    j = jnp.from_dlpack(v)
    assert j.unsafe_buffer_pointer() != ptr
    assert np.asarray(j).tolist() == [1.0, 2.0, 3.0]


EXPECTED_PLAIN = [[0.0, 0.5, 1.0], [1.5, 2.0, 2.5]]


def test_plain_struct_to_numpy_shares_memory():
    t, ptr = ext.plain_tensor()
    a = np.from_dlpack(t)
    assert a.tolist() == EXPECTED_PLAIN
    assert a.ctypes.data == ptr


@needs_torch
def test_plain_struct_to_torch_shares_memory():
    t, ptr = ext.plain_tensor()
    x = torch.from_dlpack(t)
    assert x.tolist() == EXPECTED_PLAIN
    assert x.data_ptr() == ptr


@needs_jax
def test_plain_struct_to_jax_shares_memory():
    t, ptr = ext.plain_tensor()
    j = jnp.from_dlpack(t)  # 64-byte aligned (AlignedBuffer): shared, not copied
    assert j.unsafe_buffer_pointer() == ptr
    assert np.asarray(j).tolist() == EXPECTED_PLAIN


# ---------------------------------------------------------------------------------------------
# A mutable class with its own __dlpack__ over a backing enum (export_dlpack_value)


@pytest.mark.parametrize("aligned", [False, True])
def test_backed_class_answers_the_protocol(aligned):
    img = ext.BackedImage(4, aligned)
    a = np.from_dlpack(img)
    assert a.tolist() == [0, 1, 2, 3] and not a.flags.writeable
    # numpy >= 2.1 asks for a versioned capsule: shared, read-only; numpy 2.0 for a legacy one,
    # which cannot say read-only: a copy (imported read-only all the same).
    assert (a.ctypes.data == img.data_ptr) == NUMPY_VERSIONED
    img.clear()  # the export keeps the old bytes alive
    assert list(img.values()) == [0, 0, 0, 0]
    assert a.tolist() == [0, 1, 2, 3]
    with pytest.raises(BufferError, match="read-only"):
        img.__dlpack__(copy=False)  # legacy, read-only, no copy allowed
    with pytest.raises(ValueError):
        img.__dlpack__(copy=1)
    assert ext.inspect(img.__dlpack__(copy=True, max_version=(1, 3)))["copied"] is True


@needs_torch
def test_backed_class_through_torch_stays_borrowed():
    img = ext.BackedImage(3)
    t = torch.from_dlpack(img)
    assert t.data_ptr() == img.data_ptr
    with pytest.raises(BufferError, match="already borrowed"):
        ext.add_one(t)
    assert list(img.values()) == [0, 1, 2]


@needs_jax
def test_backed_class_to_jax():
    img = ext.BackedImage(4, True)
    assert jnp.from_dlpack(img).tolist() == [0, 1, 2, 3]  # a copy: legacy request
