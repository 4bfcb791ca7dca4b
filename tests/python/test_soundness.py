"""Soundness reproducers: each case here reached undefined behaviour (or granted more than the
producer does) before the borrow registry, the read-only legacy rule, the attached-thread
probe and the bare-capsule rule; each now asserts the one right answer.

Here: the borrow registry (aliasing views, memory a Rust owner exports, typed arguments, strided
layouts) and deleters on threads. What an import may grant is in test_soundness_imports.py, an
object's own `__dlpack__` in test_soundness_own_dlpack.py.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import jnp, needs_jax, needs_numpy_versioned, needs_torch, torch


# -- 2. Aliasing mutable views ---------------------------------------------------------------


@needs_numpy_versioned
@pytest.mark.parametrize("mode", ["mut-mut", "ref-mut", "mut-ref"])
def test_two_imports_of_one_array_cannot_alias(mode):
    x = np.zeros(4, dtype=np.float32)
    with pytest.raises(BufferError, match="already borrowed|mutably borrowed"):
        ext.alias_views(x, x, mode)
    # Nothing was written through the refused view, and the first view's write (if any)
    # reached the array.
    assert x[1:].tolist() == [0.0, 0.0, 0.0]


@needs_numpy_versioned
def test_overlapping_slices_of_one_array_cannot_alias():
    base = np.zeros(8, dtype=np.float32)
    with pytest.raises(BufferError):
        ext.alias_views(base[0:5], base[4:8], "mut-mut")
    # Disjoint windows of one array are fine.
    assert ext.alias_views(base[0:4], base[4:8], "mut-mut") == 1.0 + 2.0
    assert base[0] == 1.0 and base[4] == 2.0


def test_shared_views_of_one_array_coexist():
    x = np.arange(4, dtype=np.float32)
    # Two reads of the same memory are fine: as_slice + as_slice through two imports.
    assert ext.as_slice_values(x, "float32") == [0.0, 1.0, 2.0, 3.0]
    held = ext.hold(x)
    assert ext.as_slice_values(x, "float32") == [0.0, 1.0, 2.0, 3.0]
    held.release()


@needs_numpy_versioned
def test_borrows_are_released_with_the_view():
    x = np.zeros(3, dtype=np.float32)
    for _ in range(3):
        ext.add_one(x)
    assert x.tolist() == [3.0, 3.0, 3.0]


@needs_torch
def test_torch_alias_of_numpy_memory_is_seen():
    x = np.zeros(4, dtype=np.float32)
    t = torch.from_numpy(x)  # same memory, another producer
    with pytest.raises(BufferError):
        ext.alias_views(x, t, "mut-mut")


@needs_numpy_versioned
def test_borrows_are_shared_between_extension_modules():
    # image_demo is another extension module with its own copy of dlpack-rs: it sees the
    # borrow this module holds, through the registry both joined.
    import image_demo

    x = np.zeros((2, 3), dtype=np.uint8)
    with pytest.raises(BufferError, match="already borrowed"):
        ext.read_while(x, lambda: image_demo.invert(x))
    assert x.tolist() == [[0, 0, 0], [0, 0, 0]]
    assert image_demo.invert(x) == 6  # released with the view
    assert x.tolist() == [[255] * 3] * 2


def test_copy_export_of_memory_being_written_is_refused():
    t = ext.make_export_f64([4])
    with pytest.raises(BufferError, match="mutably borrowed"):
        ext.copy_while_writing(t, t)
    assert np.from_dlpack(t).tolist() == [1.0, 1.0, 2.0, 3.0]  # the writer finished


# -- 3. Memory a Rust owner exports stays readable by Rust -------------------------------------


def test_derived_export_refuses_mutable_rust_import():
    v = ext.derived_vector([1.0, 2.0, 3.0])
    # Rust code of the class may read its Vec through &self at any time: an import of its
    # export may read, never write.
    assert ext.as_slice_values(v, "float32") == [1.0, 2.0, 3.0]
    with pytest.raises(BufferError, match="already borrowed"):
        ext.add_one(v)
    assert np.from_dlpack(v).tolist() == [1.0, 2.0, 3.0]


@needs_torch
def test_derived_export_through_torch_stays_borrowed():
    v = ext.derived_vector([1.0, 2.0])
    t = torch.from_dlpack(v)  # torch ignores READ_ONLY and re-exports writable
    with pytest.raises(BufferError, match="already borrowed"):
        ext.add_one(t)
    assert t.tolist() == [1.0, 2.0]
    del t
    # A dlpack_rs.Tensor that owns its data outright (a Vec moved in) is read from Rust only
    # through registered views: its export may be imported mutably once nothing else views it.
    own = ext.make_export_f64([3])
    ext.add_one(own)
    assert np.from_dlpack(own).tolist() == [1.0, 2.0, 3.0]


def _run(code):
    """Runs `code` in a fresh interpreter (a crash there fails the test, not the suite)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )


@needs_torch
@pytest.mark.parametrize("writer", ["add_one", "typed_add"])
def test_static_export_through_torch_is_never_written(writer):
    # A `&'static [f32]` lives in read-only memory: torch ignores READ_ONLY and re-exports it
    # writable; a mutable view of that re-export wrote .rodata (SIGSEGV). The export holds a
    # shared borrow of its bytes: the view is refused.
    r = _run(
        f"""
        import numpy as np, torch, dlpack_testext as ext
        t = torch.from_dlpack(ext.static_tensor())
        try:
            if {writer!r} == "add_one":
                ext.add_one(t)
            else:
                ext.typed_add(np.ones(4, np.float32), np.ones(4, np.float32), t)
            print("written")
        except BufferError as e:
            print("refused:", e)
        print(ext.static_values(), t.tolist())
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    refused, values = r.stdout.splitlines()
    assert refused.startswith("refused:") and "already borrowed" in refused
    assert values == "[1.0, 2.0, 3.0, 4.0] [1.0, 2.0, 3.0, 4.0]"


SHARED_ROUTES = {
    "Export(Arc<[f32]>)": lambda s: s.tensor(),
    "Export(Arc<Arc<[f32]>>)": lambda s: s.nested_tensor(),
    "derived plain struct": lambda s: s.plain_capsule(),
}


@needs_torch
@pytest.mark.parametrize("route", list(SHARED_ROUTES))
def test_shared_export_through_torch_keeps_rust_readers_safe(route):
    s = ext.SharedData(4)
    t = torch.from_dlpack(SHARED_ROUTES[route](s))
    for write in (ext.add_one, lambda x: ext.typed_add(np.ones(4, np.float32), np.ones(4, np.float32), x)):
        with pytest.raises(BufferError, match="already borrowed"):
            write(t)
    # Rust's other handle of the data reads what it always did.
    assert s.values() == [0.0, 1.0, 2.0, 3.0]
    # Shared views are fine meanwhile.
    assert ext.as_slice_values(t, "float32") == [0.0, 1.0, 2.0, 3.0]


@needs_torch
def test_shared_arcarray_export_through_torch_keeps_rust_readers_safe():
    s = ext.SharedData(3)
    t = torch.from_dlpack(s.array_capsule())
    with pytest.raises(BufferError, match="already borrowed"):
        ext.add_one(t)
    assert s.array_values() == [0.0, 1.0, 2.0]


@needs_torch
def test_shared_export_borrow_lives_until_the_consumer_lets_go():
    s = ext.SharedData(2)
    tensor = s.tensor()
    t = torch.from_dlpack(tensor)
    del tensor  # torch's reference keeps our export (and its borrow) alive
    with pytest.raises(BufferError, match="already borrowed"):
        ext.add_one(t)


@needs_torch
def test_capsule_export_borrow_is_seen_by_another_module():
    # This module's first contact with Python is `into_capsule_versioned` of a `&'static`
    # slice; image_demo (its own copy of dlpack-rs) then publishes the process's borrow
    # registry. The export's shared borrow must be in the registry image_demo sees, or
    # image_demo's mutable view of torch's (writable) re-export writes .rodata (SIGSEGV).
    r = _run(
        """
        import numpy as np, torch, image_demo
        import dlpack_testext as ext
        t = torch.from_dlpack(ext.static_bytes_capsule())
        try:
            image_demo.invert(t)
            print("written")
        except BufferError as e:
            print("refused:", e)
        print(list(ext.static_bytes_values()), t.tolist())
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    refused, values = r.stdout.splitlines()
    assert refused.startswith("refused:") and "already borrowed" in refused
    assert values == "[1, 2, 3, 4] [1, 2, 3, 4]"


# -- 4. Deleters on threads that never attached ------------------------------------------------


def test_keepalive_released_attached_after_a_subinterpreter():
    # Once a sub-interpreter has existed, PyGILState_Check() answers 1 on every thread; a
    # deleter on a plain thread must still attach before releasing the Python object.
    code = textwrap.dedent(
        """
        import sys
        try:
            import _interpreters as interp
        except ImportError:
            import _xxsubinterpreters as interp
        interp.destroy(interp.create())
        import dlpack_testext as ext
        attached, unattached = ext.drop_probes_on_plain_threads(50)
        print(attached, unattached)
        sys.exit(0 if (attached, unattached) == (50, 0) else 1)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


# -- Typed, borrow-checked arguments (TensorView / TensorViewMut, C-contiguous) --------------------


@needs_torch
def test_typed_arguments_compute():
    a = np.arange(4, dtype=np.float32)
    b = torch.ones(4)
    out = np.zeros(4, dtype=np.float32)
    ext.typed_add(a, b, out)
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert ext.typed_sum(np.ones((2, 3))) == 6.0


def test_typed_arguments_name_the_dtype_python_users_write():
    x = np.zeros(4, dtype=np.float32)
    with pytest.raises(TypeError, match=r"expected a tensor of float32, got int64"):
        ext.typed_add(np.zeros(4, dtype=np.int64), x, x.copy())


def test_typed_arguments_check_dimensions_and_layout():
    x = np.zeros(4, dtype=np.float32)
    with pytest.raises(TypeError, match="expected a 1-dimensional tensor, got 2"):
        ext.typed_add(np.zeros((2, 2), dtype=np.float32), x, x.copy())
    with pytest.raises(BufferError, match="C-contiguous.*ascontiguousarray"):
        ext.typed_sum(np.ones((3, 4))[:, ::2])
    assert ext.typed_sum(np.ascontiguousarray(np.ones((3, 4))[:, ::2])) == 6.0


@needs_numpy_versioned
def test_typed_output_cannot_alias_an_input():
    x = np.ones(3, dtype=np.float32)
    with pytest.raises(BufferError, match="already borrowed"):
        ext.typed_add(x, x, x)  # out would be written while a and b read it
    assert x.tolist() == [1.0, 1.0, 1.0]
    y = np.zeros(3, dtype=np.float32)
    ext.typed_add(x, x, y)  # two shared reads of one array are fine
    assert y.tolist() == [2.0, 2.0, 2.0]


@needs_jax
def test_typed_output_must_be_writable():
    ro = np.zeros(3, dtype=np.float32)
    ro.flags.writeable = False
    x = np.ones(3, dtype=np.float32)
    with pytest.raises(BufferError, match="read-only"):
        ext.typed_add(x, x, ro)
    with pytest.raises(BufferError, match="read-only"):
        ext.typed_add(x, x, jnp.zeros(3, dtype=jnp.float32))


# -- Borrows are exact for strided layouts -----------------------------------------------------


@needs_numpy_versioned
def test_interleaved_disjoint_elements_may_be_viewed_mutably_together():
    # In a fresh interpreter, where this crate's import makes rust-numpy's table (ours, exact by
    # bytes); with rust-numpy's own table the views are described to it by their byte ranges
    # (its rule ignores element width), so such a pair of numpy views is refused there.
    code = """
import numpy as np
import pytest
import dlpack_testext as ext
""" + textwrap.dedent(_INTERLEAVED) + """
print("ok")
"""
    r = _run(code)
    assert r.stdout.strip() == "ok", r.stderr[-3000:]


_INTERLEAVED = """
z = np.zeros(16, dtype=np.float32)
ext.tvm_pair(z[::2], z[1::2])  # rust-numpy grants this pair too
assert z.tolist() == [1.0, 2.0] * 8
# Channels of an image: one element in three, each channel its own.
img = np.zeros((4, 5, 3), dtype=np.float32)
ext.tvm_pair(img[..., 0], img[..., 2])
assert img[..., 0].tolist() == np.ones((4, 5)).tolist()
assert img[..., 1].tolist() == np.zeros((4, 5)).tolist()
assert img[..., 2].tolist() == (2 * np.ones((4, 5))).tolist()
# What shares a byte is still refused, in either order and with any offset.
for a, b in [(z[::2], z[::4]), (z[1::2], z[5::4]), (z[::2], z[2:9]), (z, z[1::2]),
             (z[::-2], z[1::2])]:
    with pytest.raises(BufferError, match="borrowed"):
        ext.tvm_pair(a, b)
    with pytest.raises(BufferError, match="borrowed"):
        ext.tvm_pair(b, a)
# Reversed, the odd elements are still disjoint from the even ones.
ext.tvm_pair(z[::-2], z[::2])
assert z.tolist() == [2.0, 1.0] * 8
"""
