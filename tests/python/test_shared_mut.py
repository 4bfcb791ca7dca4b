"""The shared-mutable model (`safe::SharedMut`) and the opt-in zero-copy legacy export of
read-only data, seen from numpy, torch and jax.

- A view taken before an in-place Rust edit sees the edit (numpy, torch); jax gets the memory
  zero-copy (a writable export answers its legacy request without a copy).
- A Rust guard and a mutable view of an import of the export exclude each other, with the
  protocol's `BufferError`.
- kornia's shape of class (a mutable class over a backing enum, `export_dlpack_value`) behaves
  the same for host pixels and copy-on-write for borrowed (read-only) ones.
- `#[dlpack(legacy_read_only = "share")]`: jax shares read-only data instead of copying it, and
  the export still holds its registry borrow.
"""

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import jnp, needs_jax, needs_numpy_versioned, needs_torch, torch

EXPECTED = list(range(12))
INVERTED = [255 - v for v in EXPECTED]


def images():
    return [ext.SharedImage(2, 3, 2), ext.KorniaImage(2, 3, 2)]


@needs_numpy_versioned  # numpy 2.0 asks for legacy capsules: it imports them read-only
@pytest.mark.parametrize("make", [lambda: ext.SharedImage(2, 3, 2), lambda: ext.KorniaImage(2, 3, 2)],
                         ids=["derived", "kornia"])
def test_numpy_view_taken_before_an_edit_sees_it(make):
    img = make()
    a = np.from_dlpack(img)
    assert a.flags.writeable
    assert a.shape == (2, 3, 2)
    assert a.ctypes.data == img.data_ptr
    img.invert()
    assert a.ravel().tolist() == INVERTED
    # And Rust sees numpy's writes (a foreign write, made while no Rust guard lives).
    a[0, 0, 0] = 7
    if isinstance(img, ext.SharedImage):
        assert list(img.to_list())[0] == 7
    b = np.from_dlpack(img)
    assert b[0, 0, 0] == 7


@needs_torch
@pytest.mark.parametrize("make", [lambda: ext.SharedImage(2, 3, 2), lambda: ext.KorniaImage(2, 3, 2)],
                         ids=["derived", "kornia"])
def test_torch_view_taken_before_an_edit_sees_it(make):
    img = make()
    t = torch.from_dlpack(img)
    assert t.data_ptr() == img.data_ptr
    img.invert()
    assert t.flatten().tolist() == INVERTED


@needs_jax
@pytest.mark.parametrize("make", [lambda: ext.SharedImage(2, 3, 2), lambda: ext.KorniaImage(2, 3, 2)],
                         ids=["derived", "kornia"])
def test_jax_gets_the_memory_without_a_copy(make):
    img = make()
    j = jnp.from_dlpack(img)
    assert j.unsafe_buffer_pointer() == img.data_ptr
    assert np.asarray(j).ravel().tolist() == EXPECTED


def test_rust_write_refused_while_a_mutable_view_of_an_import_lives():
    img = ext.SharedImage(2, 3, 2)
    with pytest.raises(BufferError, match="already borrowed"):
        ext.shared_invert_during_mut_view(img, img)
    with pytest.raises(BufferError, match="mutably borrowed"):
        ext.shared_read_during_mut_view(img, img)
    with pytest.raises(BufferError, match="already borrowed"):
        ext.shared_mut_view_during_read(img)
    # Every guard and view was released: the edit goes through now.
    img.invert()
    assert list(img.to_list()) == INVERTED


@needs_numpy_versioned  # numpy 2.0 imports legacy capsules read-only: no mutable view
def test_rust_write_refused_while_rust_numpys_mutable_view_of_the_export_lives():
    # This crate's borrow table is the suite's (conftest.py): rust-numpy's borrows are registry
    # borrows, which a Rust guard meets (found in review: with a table of its own, which the
    # registry never saw, the write went through under rust-numpy's mutable view).
    img = ext.SharedImage(2, 3, 2)
    a = np.from_dlpack(img)
    with pytest.raises(BufferError, match="already borrowed"):
        ext.shared_invert_during_np_rw(img, a)
    assert list(img.to_list()) == EXPECTED
    img.invert()  # every borrow was given back
    assert a.ravel().tolist() == INVERTED


@needs_torch
def test_rust_write_refused_while_a_mutable_view_of_torchs_reexport_lives():
    img = ext.SharedImage(2, 3, 2)
    t = torch.from_dlpack(img)
    with pytest.raises(BufferError, match="already borrowed"):
        ext.shared_invert_during_mut_view(img, t)
    # torch holding the export blocks nothing by itself.
    img.invert()
    assert t.flatten().tolist() == INVERTED


def test_exports_hold_no_borrow_so_edits_go_through():
    img = ext.SharedImage(1, 2, 2)
    views = [np.from_dlpack(img) for _ in range(3)]
    img.invert()
    img.invert()
    assert all(v.ravel().tolist() == [0, 1, 2, 3] for v in views)


def test_borrowed_backing_is_copy_on_write():
    img = ext.KorniaImage(2, 3, 2, borrowed=True)
    a = np.from_dlpack(img)
    assert not a.flags.writeable
    img.invert()  # new pixels: the old view keeps the old ones
    assert a.ravel().tolist() == EXPECTED
    assert np.from_dlpack(img).ravel().tolist() == INVERTED


@needs_jax
def test_borrowed_backing_is_copied_for_jax():
    img = ext.KorniaImage(2, 3, 2, borrowed=True)
    j = jnp.from_dlpack(img)
    assert j.unsafe_buffer_pointer() != img.data_ptr
    assert np.asarray(j).ravel().tolist() == EXPECTED


def test_legacy_read_only_opt_in_returns_a_legacy_capsule():
    shared, copied, _, _ = ext.legacy_read_only_pair(16)
    assert "dltensor" in repr(shared.__dlpack__())
    assert "dltensor" in repr(shared.__dlpack__(copy=False))
    with pytest.raises(BufferError):
        copied.__dlpack__(copy=False)
    # Versioned requests still carry READ_ONLY: numpy's view is read-only.
    assert not np.from_dlpack(shared).flags.writeable


@needs_jax
def test_legacy_read_only_opt_in_shares_with_jax():
    shared, copied, p_shared, p_copied = ext.legacy_read_only_pair(16)
    js = jnp.from_dlpack(shared)
    jc = jnp.from_dlpack(copied)
    assert js.unsafe_buffer_pointer() == p_shared
    assert jc.unsafe_buffer_pointer() != p_copied
    assert np.asarray(js).tolist() == list(range(16))
    assert np.asarray(jc).tolist() == list(range(16))
    # The shared legacy export still holds its borrow: a writable import of jax's re-export of
    # the same memory cannot take a mutable view of it.
    with pytest.raises(BufferError, match="already borrowed"):
        ext.add_one_legacy_writable(js)
    assert np.asarray(js).tolist() == list(range(16))
