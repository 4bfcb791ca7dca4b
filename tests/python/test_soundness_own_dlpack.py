"""Soundness reproducers: an object's own `__dlpack__` is never bypassed. A torch subclass that
overrides `__dlpack__` (or refuses in `__torch_function__`), or a class that copies torch's
exchange table, is imported through what it says now, never through torch's table.
"""

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import needs_torch, needs_version_tags, torch


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
def test_torchs_disabled_torch_function_as_dlpack_is_an_override():
    # torch._C._disabled_torch_function_impl means "nothing to dispatch" only as
    # `__torch_function__` (nn.Parameter's). As `__dlpack__` it is an override, whose call
    # raises: every import route must raise as the object's own `__dlpack__` does, never read
    # the tensor through torch's table.
    class DlpackIsDisabled(torch.Tensor):
        __dlpack__ = torch._C._disabled_torch_function_impl

    base = torch.zeros(4, dtype=torch.uint8)
    t = base.as_subclass(DlpackIsDisabled)
    with pytest.raises(TypeError):
        t.__dlpack__()
    with pytest.raises(TypeError):
        np.from_dlpack(t)  # the peer agrees
    for route in (ext.sum_view, ext.add_one_mut, lambda x: ext.as_slice_values(x, "uint8"),
                  ext.tvm_invert_any):
        with pytest.raises(TypeError):
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
