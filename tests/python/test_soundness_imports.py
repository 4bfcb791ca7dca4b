"""Soundness reproducers: imports never grant more than the producer does (a legacy capsule is
read-only; what torch's exchange table would hand over for a tensor that requires grad or is a
conjugate view is refused; the table is found in the type's own dictionaries; a bare capsule is
refused by the safe import); and jax, which asks for legacy capsules, gets read-only Rust
tensors as copies and writable ones zero copy.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import jnp, needs_jax, needs_torch, torch


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


@needs_jax
def test_a_writable_reexport_reaches_jax_zero_copy_even_for_bool():
    # jax asks with neither copy nor max_version: only read-only data may get a copy then
    # (SAFETY.md), so a writable numpy source, bool included, is shared with jnp.from_dlpack(copy=False).
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


class _TensorSubclass(torch.Tensor if torch is not None else object):
    pass


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: torch.arange(4.0)._neg_view(), id="neg_view"),
        pytest.param(lambda: torch.tensor([1 + 2j, 3 - 4j]).conj().imag, id="conj_imag"),
        pytest.param(lambda: torch.arange(4.0)._neg_view().as_subclass(_TensorSubclass), id="subclass"),
    ],
)
def test_torch_negative_bit_is_refused_on_every_route(make):
    t = make()
    assert t.is_neg()
    for exchange_api in (True, False):
        with pytest.raises(BufferError, match=r"negative bit.*resolve_neg\(\)"):
            ext.import_info(t, exchange_api=exchange_api)
    if t.dtype == torch.float32:
        with pytest.raises(BufferError, match="resolve_neg"):
            ext.tr_sum(t)  # a typed argument: the table's non-owning view
        with pytest.raises(BufferError, match="resolve_neg"):
            ext.tm_touch(t)  # a mutable typed argument: the owned route
    # Resolved, the same values import (negated, as torch shows them).
    r = t.resolve_neg()
    assert not r.is_neg()
    assert ext.import_info(r)["shape"] == list(r.shape)
    if r.dtype == torch.float32:
        assert ext.tr_sum(r) == pytest.approx(float(r.sum()))


@needs_torch
def test_negative_bit_is_asked_past_a_subclass_torch_function():
    # torch's read-only wrapper refuses every torch function but the export ones, `is_neg`
    # included: the bit is read as torch's default `__torch_function__` reads it.
    from torch.utils.dlpack import ReadOnlyTensorWrapper

    with pytest.raises(BufferError, match="resolve_neg"):
        ext.import_info(ReadOnlyTensorWrapper(torch.arange(4.0)._neg_view()))
    assert ext.import_info(ReadOnlyTensorWrapper(torch.arange(4.0)))["read_only"]


@needs_torch
def test_negative_bit_is_asked_of_torch_not_of_a_patch():
    n = torch.arange(1.0, 5.0)._neg_view()
    n.is_neg = lambda: False  # an instance attribute
    with pytest.raises(BufferError, match="resolve_neg"):
        ext.tr_sum(n)
    with pytest.raises(BufferError, match="resolve_neg"):
        ext.import_info(n, exchange_api=False)
    original = torch.Tensor.is_neg
    torch.Tensor.is_neg = lambda self: False  # a patch of the class
    try:
        with pytest.raises(BufferError, match="resolve_neg"):
            ext.tr_sum(torch.arange(1.0, 5.0)._neg_view())
    finally:
        torch.Tensor.is_neg = original


@needs_torch
def test_a_module_posing_as_torch_is_not_kept():
    # Run in a fresh interpreter: the check keeps what it finds of torch for the process.
    code = textwrap.dedent(
        """
        import sys, types
        import numpy as np
        import dlpack_testext as ext

        class FakeTensor:
            def __init__(self, a):
                self.a = a
            def __dlpack__(self, **kw):
                return self.a.__dlpack__(**kw)
            def __dlpack_device__(self):
                return self.a.__dlpack_device__()

        fake = types.ModuleType("torch")
        fake.Tensor = FakeTensor
        fake._C = types.SimpleNamespace(TensorBase=object, _disabled_torch_function_impl=None)
        sys.modules["torch"] = fake
        assert ext.tr_sum(FakeTensor(np.ones(4, np.float32))) == 4.0
        del sys.modules["torch"]
        import torch
        try:
            ext.tr_sum(torch.arange(1.0, 5.0)._neg_view())
        except BufferError as e:
            assert "resolve_neg" in str(e)
        else:
            raise AssertionError("a negated view was imported")
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_torch
def test_a_module_posing_as_torch_names_no_disabled_torch_function():
    # A module posing as torch, with torch's real TensorBase and Tensor but its own
    # `_C._disabled_torch_function_impl`, must not make a subclass's `__torch_function__` (which
    # refuses `__dlpack__` here) count as "dispatches nothing": every import refuses as the
    # subclass's own `__dlpack__` does. Fresh interpreter: the check keeps what it finds of torch.
    code = textwrap.dedent(
        """
        import sys, types
        import numpy as np
        import torch
        import dlpack_testext as ext

        class Refuses:
            def __call__(self, func, types_, args=(), kwargs=None):
                if func is torch._C.TensorBase.is_neg:
                    return False
                raise BufferError("refused by __torch_function__")

        refuses = Refuses()

        class Sub(torch.Tensor):
            __torch_function__ = refuses

        fake = types.ModuleType("torch")
        fake.Tensor = torch.Tensor
        fake._C = types.SimpleNamespace(
            TensorBase=torch._C.TensorBase, _disabled_torch_function_impl=refuses
        )
        sys.modules["torch"] = fake
        base = torch.zeros(4, dtype=torch.uint8)
        t = base.as_subclass(Sub)
        for route in (lambda: t.__dlpack__(), lambda: np.from_dlpack(t),
                      lambda: ext.sum_view(t), lambda: ext.add_one_mut(t)):
            try:
                route()
            except BufferError as e:
                assert "refused by __torch_function__" in str(e), e
            else:
                raise AssertionError("a refusing __torch_function__ was bypassed")
        assert base.tolist() == [0, 0, 0, 0], base.tolist()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
