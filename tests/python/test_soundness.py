"""Soundness reproducers: each case here reached undefined behaviour (or granted more than the
producer does) before the borrow registry, the read-only legacy rule, the attached-thread
probe and the bare-capsule rule; each now asserts the one right answer.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import jnp, needs_jax, needs_numpy_versioned, needs_torch, needs_version_tags, torch


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


# -- Imports never grant more than the producer ----------------------------------------------


@needs_jax
def test_legacy_import_is_read_only():
    a = jnp.arange(4, dtype=jnp.float32)  # jax exports legacy capsules only
    with pytest.raises(BufferError, match="read-only"):
        ext.add_one(a)
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0]
    # Reading is fine, and a re-export stays read-only (versioned, READ_ONLY).
    assert ext.as_slice_values(a, "float32") == [0.0, 1.0, 2.0, 3.0]
    r = ext.reexport(a)
    assert r.read_only
    assert not np.from_dlpack(r).flags.writeable


class LegacyProducer:
    """A pre-1.0 producer: `__dlpack__` takes only `stream` (a legacy capsule)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_legacy_import_writable_on_request():
    x = np.zeros(2, dtype=np.float32)
    with pytest.raises(BufferError, match="read-only"):
        ext.add_one(LegacyProducer(x))
    assert x.tolist() == [0.0, 0.0]
    ext.add_one_legacy_writable(LegacyProducer(x))
    assert x.tolist() == [1.0, 1.0]


@needs_torch
def test_requires_grad_refused_through_the_exchange_table():
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="requires grad"):
        ext.import_info(t)
    with pytest.raises(BufferError):
        ext.import_info(t, exchange_api=False)
    assert ext.import_info(t.detach())["shape"] == [3]
    # A view that requires grad through its base, and a non-leaf: refused the same way.
    with pytest.raises(BufferError, match="requires grad"):
        ext.import_info(t[1:])
    with pytest.raises(BufferError, match="requires grad"):
        ext.import_info(t * 2)


@needs_torch
def test_requires_grad_of_a_subclass_is_read_as_getattr_would():
    # The table import reads torch's `requires_grad` getter directly; a subclass whose own
    # `requires_grad` is a Python property (found first in its MRO) is read through it instead.
    class Plain(torch.Tensor):
        pass

    class Claims(torch.Tensor):
        @property
        def requires_grad(self):
            return True

    base = torch.ones(3)
    assert ext.import_info(base.as_subclass(Plain))["shape"] == [3]
    with pytest.raises(BufferError, match="requires grad"):
        ext.import_info(torch.ones(3, requires_grad=True).as_subclass(Plain))
    with pytest.raises(BufferError, match="requires grad"):
        ext.import_info(base.as_subclass(Claims))


@needs_torch
def test_a_requires_grad_gained_after_the_first_import_is_honoured():
    # The direct getter is used only while the type is unchanged (its version tag).
    class Later(torch.Tensor):
        pass

    t = torch.ones(3).as_subclass(Later)
    assert ext.import_info(t)["shape"] == [3]  # cached with torch's getter
    Later.requires_grad = property(lambda self: True)
    with pytest.raises(BufferError, match="requires grad"):
        ext.import_info(t)
    del Later.requires_grad
    assert ext.import_info(t)["shape"] == [3]


@needs_torch
@pytest.mark.parametrize("descriptor", ["torch", "type_name"])
def test_a_copied_getset_descriptor_is_never_called_on_a_foreign_object(descriptor):
    # A class body can copy a table and a C getset descriptor of another type: the getter must
    # not be given an object of the wrong type (CPython's own check refuses it; so do we), and
    # the table's own type check refuses the object.
    getter = torch.Tensor.requires_grad if descriptor == "torch" else type.__dict__["__name__"]

    class Forged:
        __dlpack_c_exchange_api__ = torch.Tensor.__dlpack_c_exchange_api__
        requires_grad = getter

    # The getter is not called (getattr's TypeError counts as "no grad"); each table's own
    # type check refuses the object. (An attribute look-up first gives the type a version tag,
    # as a type in use has.)
    Forged().__class__.requires_grad
    with pytest.raises(BufferError, match="Unable to cast"):
        ext.import_info(Forged())

    class ForgedOurs:
        __dlpack_c_exchange_api__ = type(ext.derived_vector([1.0])).__dlpack_c_exchange_api__
        requires_grad = getter

    ForgedOurs().__class__.requires_grad
    with pytest.raises(TypeError, match="not an instance of 'DerivedVector'"):
        ext.import_info(ForgedOurs())


@needs_torch
def test_conjugate_view_refused_through_the_exchange_table():
    t = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).conj()
    assert t.is_conj()
    with pytest.raises(BufferError):
        ext.import_info(t)
    assert ext.import_info(t.resolve_conj())["shape"] == [2]


# -- 6. A capsule's name proves nothing ----------------------------------------------------------


def test_bare_capsule_refused_by_the_safe_import():
    cap = np.arange(3, dtype=np.float32).__dlpack__()
    with pytest.raises(TypeError, match="bare DLPack capsule"):
        ext.import_safely(cap)


def test_exchange_table_is_read_from_the_type_not_its_metaclass():
    # `type(obj).__dlpack_c_exchange_api__` through getattr would let a metaclass property
    # (a data descriptor, which wins over the class dictionary) hand over any table; the
    # lookup reads the type's own __mro__ dictionaries, where Probe's counting table is.
    class Meta(type):
        @property
        def __dlpack_c_exchange_api__(cls):
            return ext.probe_api("failing")

    class Sneaky(ext.Probe, metaclass=Meta):
        pass

    assert Sneaky.__dlpack_c_exchange_api__ is not ext.Probe.__dict__["__dlpack_c_exchange_api__"]
    s = Sneaky([1.0, 2.0])
    s.__dict__["__dlpack_c_exchange_api__"] = object()  # an instance attribute is no table either
    c0, p0, _ = ext.probe_counters()
    assert ext.import_info(s)["shape"] == [2]  # the failing table would raise ValueError
    c1, p1, _ = ext.probe_counters()
    assert (c1 - c0, p1 - p0) == (1, 0)  # one call of Probe's own table, no __dlpack__



def test_exchange_table_mro_is_not_redirected_by_a_metaclass():
    # A metaclass property named `__mro__` (or `__dict__`) shadowed the type's own when the
    # lookup read them as plain attributes: it could point the lookup at another type's table
    # (found in review). The lookup now reads them through `type`'s own descriptors.
    class Meta(type):
        @property
        def __mro__(cls):
            return (FailingTable, object)

    class FailingTable:
        __dlpack_c_exchange_api__ = ext.probe_api("failing")

    class Sneaky(ext.Probe, metaclass=Meta):
        pass

    assert Sneaky.__mro__[0] is FailingTable  # what a plain attribute read sees
    s = Sneaky([1.0, 2.0])
    c0, p0, _ = ext.probe_counters()
    assert ext.import_info(s)["shape"] == [2]  # the failing table would raise ValueError
    c1, p1, _ = ext.probe_counters()
    assert (c1 - c0, p1 - p0) == (1, 0)  # Probe's own table, found through the real MRO

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


# -- jax takes read-only Rust tensors (a legacy request copies read-only data when copy=None) --


@needs_jax
def test_jax_takes_a_read_only_rust_tensor():
    s = ext.SharedData(4)
    a = jnp.from_dlpack(s.tensor())
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0]
    static = jnp.from_dlpack(ext.static_tensor())
    assert static.tolist() == [1.0, 2.0, 3.0, 4.0]


@needs_jax
def test_jax_takes_a_bool_rust_tensor():
    t = ext.make_tensor(bytes([1, 0, 1, 1]), "bool", [4])
    assert jnp.from_dlpack(t).tolist() == [True, False, True, True]


@needs_jax
def test_jax_round_trip_through_a_rust_tensor():
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    y = jnp.from_dlpack(ext.reexport(x))  # the legacy import is read-only: copied back
    assert y.tolist() == x.tolist()


def test_legacy_request_of_read_only_data_copies_unless_copy_false():
    s = ext.SharedData(3)
    t = s.tensor()
    # copy=None (or absent): a copy, since a legacy capsule cannot say "read-only".
    for kwargs in ({}, {"copy": None}):
        cap = t.__dlpack__(**kwargs)
        info = ext.inspect(cap)
        assert info["data_ptr"] != s.data_ptr()
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__(copy=False)
    # A versioned request shares the memory, flagged read-only.
    info = ext.inspect(t.__dlpack__(max_version=(1, 3)))
    assert info["data_ptr"] == s.data_ptr() and info["read_only"]
    # numpy's legacy import of the copy reads the same values.
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0]


def test_typed_argument_of_a_read_only_dlpack_rs_tensor_reads_it():
    class Legacy:  # a pre-1.0 producer: its import is read-only
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    # Our table lends no read-only tensor as a bare DLTensor; the typed argument reads it all the
    # same (a BufferError before, found in review).
    ro = ext.reexport(Legacy(np.arange(3, dtype=np.float64)))
    assert ext.typed_sum(ro) == 3.0


@needs_torch
@pytest.mark.parametrize("route", ["numel", "tr_sum", "tv_values", "typed_numel"])
def test_a_class_that_copies_torchs_table_is_refused_by_torch(route):
    """The exchange table is found in the type's own dictionaries, and a class body may copy
    torch's capsule: torch's table functions then get an object that is no tensor. They check
    it (review question), so every import route raises instead of reading a foreign object."""

    class Fake:
        __dlpack_c_exchange_api__ = torch.Tensor.__dlpack_c_exchange_api__

        def __dlpack__(self, **kwargs):
            raise TypeError("not a tensor")

    with pytest.raises((BufferError, TypeError)):
        getattr(ext, route)(Fake())


# -- An object's own __dlpack__ is never bypassed ----------------------------------------------


def _torch_subclasses():
    class NoExport(torch.Tensor):
        def __dlpack__(self, **kwargs):
            raise BufferError("this tensor is not for export")

    class ExportsCopy(torch.Tensor):
        # Exports a copy whose elements are 7: an import must see the copy, not the tensor.
        def __dlpack__(self, **kwargs):
            return torch.full_like(self.as_subclass(torch.Tensor), 7).__dlpack__(**kwargs)

    class ExportsReadOnly(torch.Tensor):
        def __dlpack__(self, **kwargs):
            x = self.as_subclass(torch.Tensor).numpy()
            view = x.view()
            view.flags.writeable = False
            return view.__dlpack__(**kwargs)

    class OwnDevice(torch.Tensor):
        # Overrides only __dlpack_device__: the table's owner no longer speaks for it either.
        def __dlpack_device__(self):
            return torch.Tensor.__dlpack_device__(self.as_subclass(torch.Tensor))

    return NoExport, ExportsCopy, ExportsReadOnly, OwnDevice


@needs_torch
def test_a_torch_subclass_own_dlpack_is_honoured_by_every_import_route():
    # torch's exchange table is found up the class hierarchy; using it would bypass the
    # subclass's own __dlpack__, which torch.from_dlpack and np.from_dlpack honour.
    NoExport, ExportsCopy, ExportsReadOnly, OwnDevice = _torch_subclasses()
    base = torch.zeros(4, dtype=torch.uint8)

    t = base.as_subclass(NoExport)
    for route in (ext.sum_view, ext.add_one_mut, lambda x: ext.as_slice_values(x, "uint8"),
                  ext.tvm_invert_any):
        with pytest.raises(BufferError, match="not for export"):
            route(t)
    with pytest.raises(BufferError, match="not for export"):
        np.from_dlpack(t)  # the peer agrees

    t = base.as_subclass(ExportsCopy)
    assert ext.sum_view(t) == 28
    assert ext.as_slice_values(t, "uint8") == [7.0] * 4
    assert ext.add_one_mut(t) == 4  # writes the copy
    assert base.tolist() == [0, 0, 0, 0]

    t = base.as_subclass(ExportsReadOnly)
    assert ext.sum_view(t) == 0
    for route in (ext.add_one_mut, ext.add_one, ext.tvm_invert_any):
        with pytest.raises(BufferError, match="read-only"):
            route(t)
    assert base.tolist() == [0, 0, 0, 0]

    t = base.as_subclass(OwnDevice)
    assert ext.add_one_mut(t) == 4 and base.tolist() == [1, 1, 1, 1]


@needs_torch
def test_a_subclass_refusing_in_torch_function_or_copying_the_capsule_is_honoured():
    def refuse(self, **kwargs):
        raise BufferError("this tensor is not for export")

    class ViaTorchFunction(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__dlpack__:
                raise BufferError("this tensor is not for export")
            return super().__torch_function__(func, types, args, kwargs or {})

    class CopiesCapsule(torch.Tensor):
        __dlpack_c_exchange_api__ = torch.Tensor.__dlpack_c_exchange_api__
        __dlpack__ = refuse

    base = torch.zeros(4, dtype=torch.uint8)
    for cls in (ViaTorchFunction, CopiesCapsule):
        t = base.as_subclass(cls)
        with pytest.raises(BufferError, match="not for export"):
            t.__dlpack__()
        for route in (ext.sum_view, ext.add_one_mut):
            with pytest.raises(BufferError, match="not for export"):
                route(t)
    assert base.tolist() == [0, 0, 0, 0]


@needs_torch
def test_a_torch_subclass_that_overrides_nothing_keeps_the_table():
    # nn.Parameter and plain subclasses use torch's own __dlpack__: the table speaks for them
    # (the requires_grad refusal shows the import saw the tensor as torch's table does).
    class Plain(torch.Tensor):
        pass

    t = torch.zeros(4, dtype=torch.uint8).as_subclass(Plain)
    assert ext.add_one_mut(t) == 4 and t.as_subclass(torch.Tensor).tolist() == [1, 1, 1, 1]
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(BufferError, match="requires grad"):
        ext.as_slice_values(p, "float32")


@needs_torch
@needs_version_tags
def test_a_class_changed_after_its_first_import_is_seen_as_it_is_now():
    # The per-type answer ("its __dlpack__ is the table owner's") is cached; a class given its
    # own __dlpack__ (or __torch_function__) afterwards, or whose base changes, is imported
    # through what it has now, as torch.from_dlpack would.
    def refuse(self, **kwargs):
        raise BufferError("this tensor is not for export")

    class Later(torch.Tensor):
        pass

    class Child(Later):
        pass

    base = torch.zeros(4, dtype=torch.uint8)
    t, c = base.as_subclass(Later), base.as_subclass(Child)
    assert ext.add_one_mut(t) == 4 and ext.sum_view(c) == 4  # cached: the table speaks
    Later.__dlpack__ = refuse
    for obj in (t, c):  # the class itself, and a subclass whose base changed
        for route in (ext.sum_view, ext.add_one_mut):
            with pytest.raises(BufferError, match="not for export"):
                route(obj)
    del Later.__dlpack__
    assert ext.add_one_mut(t) == 4 and ext.sum_view(c) == 8  # torch's own again
    Later.__torch_function__ = classmethod(
        lambda cls, func, types, args=(), kwargs=None: refuse(None)
    )
    with pytest.raises(BufferError, match="not for export"):
        ext.sum_view(t)
    assert base.tolist() == [2, 2, 2, 2]


@needs_torch
@needs_version_tags
def test_a_class_whose_metaclass_orders_a_non_base_is_looked_up_every_time():
    # A metaclass's own mro() may list a class that is not a base; a change to that class
    # leaves the type's version tag alone, so no cached answer may speak for the type.
    def refuse(self, **kwargs):
        raise BufferError("this tensor is not for export")

    class Extra:
        pass

    class Meta(type(torch.Tensor)):
        def mro(cls):
            order = super().mro()
            return [order[0], Extra] + order[1:]

    class Ordered(torch.Tensor, metaclass=Meta):
        pass

    t = torch.zeros(4, dtype=torch.uint8).as_subclass(Ordered)
    assert ext.add_one_mut(t) == 4
    Extra.__dlpack__ = refuse
    for i in range(20000):  # CPython's own method cache forgets the old answer
        getattr(type(f"K{i}", (), {}), "__dlpack__", None)
    with pytest.raises(BufferError, match="not for export"):
        t.__dlpack__()  # the producer refuses
    for route in (ext.sum_view, ext.add_one_mut):
        with pytest.raises(BufferError, match="not for export"):
            route(t)
    assert t.as_subclass(torch.Tensor).tolist() == [1, 1, 1, 1]


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


@needs_jax
def test_a_writable_reexport_reaches_jax_zero_copy_even_for_bool():
    # jax asks with neither copy nor max_version: only read-only data may get a copy then
    # (README), so a writable numpy source, bool included, is shared with jnp.from_dlpack(copy=False).
    def aligned(n, dtype):
        raw = np.zeros(n * np.dtype(dtype).itemsize + 64, dtype=np.uint8)
        off = (-raw.ctypes.data) % 64
        return raw[off:off + n * np.dtype(dtype).itemsize].view(dtype)

    for dtype in (np.bool_, np.float32):
        x = aligned(64, dtype)
        t = ext.reexport(x)
        assert not t.read_only
        j = jnp.from_dlpack(t, copy=False)
        assert j.unsafe_buffer_pointer() == x.ctypes.data
