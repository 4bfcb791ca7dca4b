"""Malformed and hostile producers fed to the Rust importer (`PyTensor`): each case raises the
exception the protocol names with a message that says what is wrong (or, where the input is
legal, is accepted as is), nothing crashes, and the producer's deleter runs exactly once when
ownership passed (the capsule had a DLPack name) and never when it did not.

The producers are built by hand with ctypes (dlpack_ctypes.py). Decisions on debatable cases
are stated where the case is defined.
"""

import sys
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import by_peer, collect, torch
from dlpack_ctypes import (
    BFLOAT, BOOL, CPU, FLOAT, FLOAT4_E2M1FN, FLOAT6_E2M3FN, FLOAT8_E4M3FN, INT, IS_COPIED,
    READ_ONLY, UINT, DLDataType, DLDevice, DLPackVersion, Hostile, Producer,
    set_capsule_pointer,
)

I64_MAX = 2**63 - 1
I64_MIN = -(2**63)
ISIZE_MAX = 2**63 - 1


@dataclass
class Case:
    id: str
    build: Callable  # () -> (Hostile, object to import)
    exc: Optional[type] = None  # None: the import is accepted
    match: str = ""
    passed: bool = True  # ownership passed to the consumer (the capsule had a DLPack name)
    view: Optional[str] = None  # import through a typed slice of this dtype, not `inspect`
    check: Optional[Callable] = None  # (info dict) -> None, for accepted imports
    deleter: bool = True  # the producer set a deleter
    calls: Optional[int] = None  # __dlpack__ calls expected (Producer cases)
    extra: dict = field(default_factory=dict)


CASES = []


def case(id, exc=None, match="", **kw):
    def register(build):
        CASES.append(Case(id, build, exc, match, **kw))
        return build
    return register


def edited(versioned=True, **hostile_kw):
    """Decorator helper: a Hostile passed through `edit(h)`, imported from its capsule."""
    def wrap(edit):
        def build():
            h = Hostile(versioned=versioned, **hostile_kw)
            edit(h)
            return h, h.capsule()
        return build
    return wrap


# ---- capsule names and pointers: ownership does not pass, the destructor frees ----------

def named(name, versioned=True):
    def build():
        h = Hostile(versioned=versioned)
        return h, h.capsule(name)
    return build


case("name-wrong", TypeError, "named 'dltensor' or 'dltensor_versioned'", passed=False)(
    named(b"tensor"))
case("name-unnamed", TypeError, "named 'dltensor' or 'dltensor_versioned'", passed=False)(
    named(False))
case("name-case", TypeError, "got Some\\(\"DLTENSOR\"\\)", passed=False)(named(b"DLTENSOR"))
case("name-prefix", TypeError, "named 'dltensor'", passed=False)(named(b"dltensor_v"))
# A capsule its producer already named used_ is, by the protocol, someone else's to delete:
# neither the importer nor the destructor calls the deleter.
case("name-used-legacy", ValueError, "already consumed", passed=False, extra={"used": True})(
    named(b"used_dltensor", versioned=False))
case("name-used-versioned", ValueError, "already consumed", passed=False, extra={"used": True})(
    named(b"used_dltensor_versioned"))


def null_pointer_capsule():
    # PyCapsule_New refuses NULL, so a hostile extension would have to write the field; the
    # C API then treats the capsule as invalid, and so must we (TypeError, nothing taken).
    h = Hostile()
    cap = h.capsule()
    set_capsule_pointer(cap, None)
    h.extra_restore = lambda: set_capsule_pointer(cap, h.address)
    return h, cap


case("null-pointer", TypeError, "named 'dltensor'", passed=False)(null_pointer_capsule)


# ---- versions and flags: ownership passed, the deleter runs once at once -------------------

def version(major, minor, garbage=False, flags=0):
    def edit(h):
        h.m.version = DLPackVersion(major, minor)
        h.m.flags = flags
        if garbage:  # nothing past the version may be read for another major
            h.t.ndim = -7
            h.t.shape = None
            h.t.dtype = DLDataType(FLOAT, 0, 0)
            h.t.data = None
    return edited()(edit)


for major in (0, 2, 255):
    case(f"major-{major}", BufferError, rf"unsupported DLPack version {major}\.3")(
        version(major, 3))
case("major-2-garbage-tensor", BufferError, r"unsupported DLPack version 2\.0")(
    version(2, 0, garbage=True))
case("major-max", BufferError, "unsupported DLPack version 4294967295")(version(2**32 - 1, 0))


def expect(**fields):
    def check(info):
        for k, v in fields.items():
            assert info[k] == v, (k, info[k], v)
    return check


case("minor-newer", check=expect(version=(1, 99)))(version(1, 99))
# Decision: a producer of a newer minor may set flags this consumer does not know (a newer
# minor may define them); they are kept, not refused.
case("minor-newer-unknown-flag", check=expect(version=(1, 4), flags=1 << 10))(
    version(1, 4, flags=1 << 10))
case("flag-unknown-bit3", BufferError, "flag bits 0x8 are not defined by DLPack 1.3")(
    version(1, 3, flags=1 << 3))
case("flag-bit63-v1.0", BufferError, "flag bits 0x8000000000000000 are not defined by DLPack 1.0")(
    version(1, 0, flags=1 << 63))
case("flag-all-bits", BufferError, "flag bits 0xfffffffffffffff8")(
    version(1, 3, flags=2**64 - 1))
case("flags-known", check=expect(read_only=True, copied=True))(
    version(1, 3, flags=READ_ONLY | IS_COPIED))


# ---- ndim and shape ----------------------------------------------------------------------

def shape(values, ndim=None, strides="none", versioned=True, dtype=None, data_null=False):
    def edit(h):
        h.set_shape(values, ndim)
        h.set_strides(None if strides == "none" else strides)
        if dtype is not None:
            h.t.dtype = DLDataType(*dtype)
        if data_null:
            h.t.data = None
    return edited(versioned)(edit)


case("ndim-negative", BufferError, r"ndim is negative \(-1\)")(shape([2, 3], ndim=-1))
case("ndim-int32-min", BufferError, r"ndim is negative \(-2147483648\)")(
    shape([2], ndim=-(2**31)))
# ndim 1 << 20 with a shape pointer to only 2 values: refused before the shape is read.
case("ndim-huge", BufferError, "ndim 1048576 exceeds the supported maximum of 1024")(
    shape([1, 1], ndim=1 << 20))
case("ndim-1025", BufferError, "ndim 1025 exceeds")(shape([1] * 1025))
case("ndim-null-shape", BufferError, "shape pointer is NULL but ndim > 0")(
    shape(None, ndim=2))
case("ndim-null-shape-legacy", BufferError, "shape pointer is NULL")(
    shape(None, ndim=3, versioned=False))
case("ndim-0-null-shape-and-strides", check=expect(shape=[], numel=1, ndim=0))(
    shape(None, ndim=0))
case("dim-negative", BufferError, "dimension 0 has negative extent -1")(shape([-1]))
case("dim-negative-second", BufferError, "dimension 1 has negative extent -7")(
    shape([3, -7], strides=[1, 1]))
case("dim-int64-min", BufferError, f"negative extent {I64_MIN}")(shape([I64_MIN]))
case("shape-product-overflows-usize", BufferError, "overflows")(shape([2**62, 4]))
case("shape-product-overflows-2^93", BufferError, "overflows")(shape([2**31] * 3))
case("shape-bytes-overflow-isize", BufferError, "overflows", extra={})(
    shape([2**61], dtype=(FLOAT, 64, 1)))
# Decision: a zero extent makes the tensor empty whatever the other extents multiply to
# (their product is never an element count), so this is accepted.
case("shape-zero-with-overflowing-rest", check=expect(numel=0, nbytes=0))(
    shape([0, 2**62, 2**62], strides=[0, 0, 0]))

# ---- strides -----------------------------------------------------------------------------
case("stride-extent-overflows", BufferError, "overflows")(shape([3], strides=[2**62]))
case("stride-negative-extent-overflows", BufferError, "overflows")(
    shape([3], strides=[-(2**62)]))
# The last element at index i64::MAX: one past it overflowed i64 (found by the fuzzer).
case("stride-i64-max", BufferError, "overflows")(
    shape([2], strides=[I64_MAX], dtype=(UINT, 8, 1)))
case("stride-bytes-past-isize", BufferError, "overflows")(
    shape([2, 3], strides=[2**60, 1], dtype=(FLOAT, 64, 1)))
case("stride-i64-min", BufferError, "overflows")(shape([2], strides=[I64_MIN]))
# NULL strides with ndim > 0: compact row-major before DLPack 1.2, and consumers must still
# accept them from 1.2 producers (they are synthesised, the raw value stays None).
case("strides-null-legacy", check=expect(strides=[3, 1], raw_strides=None))(
    shape([2, 3], versioned=False))
case("strides-null-versioned-1.3", check=expect(strides=[3, 1], raw_strides=None))(
    shape([2, 3]))

# ---- data --------------------------------------------------------------------------------
case("data-null-with-elements", BufferError, "data pointer is NULL but the tensor is not empty")(
    shape([2, 3], data_null=True))
case("data-null-0d", BufferError, "data pointer is NULL")(shape(None, ndim=0, data_null=True))
case("data-null-empty", check=expect(numel=0, data_ptr=0))(shape([0, 3], data_null=True))


def byte_offset(offset, dtype=(FLOAT, 32, 1)):
    def edit(h):
        h.t.byte_offset = offset
        h.t.dtype = DLDataType(*dtype)
    return edited()(edit)


# byte_offset past the end of the producer's buffer cannot be seen (DLPack carries no buffer
# size); what is refused is an addressed range that leaves isize, where even computing the
# address is undefined.
case("byte-offset-u64-max", BufferError, "overflows")(byte_offset(2**64 - 1))
case("byte-offset-2^63", BufferError, "overflows")(byte_offset(2**63))
case("byte-offset-near-isize-max", BufferError, "overflows")(byte_offset(ISIZE_MAX - 8))
case("byte-offset-unaligned-accepted", check=expect(byte_offset=3))(byte_offset(3))

# ---- devices and dtypes ------------------------------------------------------------------
# Decision: unknown device types and type codes can be held (an importer must not choke on a
# newer producer); using the data is refused: BufferError for memory the CPU cannot address,
# TypeError for a typed view of another element type.


def device(device_type, device_id=0):
    def edit(h):
        h.t.device = DLDevice(device_type, device_id)
    return edited()(edit)


case("device-unknown-held", check=expect(device=(999, 0)))(device(999))
case("device-unknown-view", BufferError, "not accessible from the CPU", view="float32")(
    device(999))
case("device-negative-view", BufferError, "not accessible from the CPU", view="float32")(
    device(-5, -1))
case("device-cuda-view", BufferError, "not accessible from the CPU", view="float32")(device(2))


def dtype(code, bits, lanes=1, shape_=(2, 3)):
    def edit(h):
        h.t.dtype = DLDataType(code, bits, lanes)
        h.set_shape(list(shape_))
        h.set_strides(None)
    return edited()(edit)


case("dtype-unknown-code-held", check=expect(dtype_code=(200, 32, 1)))(dtype(200, 32))
case("dtype-unknown-code-view", TypeError, "dtype mismatch", view="float32")(dtype(200, 32))
case("dtype-lanes-4-view", TypeError, "dtype mismatch", view="float32")(dtype(FLOAT, 32, 4))
case("dtype-lanes-0", BufferError, "invalid dtype: .*lanes 0")(dtype(FLOAT, 32, 0))
case("dtype-bits-0", BufferError, "invalid dtype: .*bits 0")(dtype(INT, 0))
case("dtype-bool-1-bit", BufferError, "invalid dtype: .*bits 1")(dtype(BOOL, 1))
case("dtype-fp4-8-bits", BufferError, "invalid dtype: .*bits 8")(dtype(FLOAT4_E2M1FN, 8))
case("dtype-fp6-8-bits", BufferError, "invalid dtype: .*bits 8")(dtype(FLOAT6_E2M3FN, 8))
case("dtype-fp8-16-bits", BufferError, "invalid dtype: .*bits 16")(dtype(FLOAT8_E4M3FN, 16))
case("dtype-bfloat-32-bits", BufferError, "invalid dtype: .*bits 32")(dtype(BFLOAT, 32))
case("dtype-fp4-packed-accepted", check=expect(numel=3, nbytes=2))(
    dtype(FLOAT4_E2M1FN, 4, shape_=(3,)))


def misaligned(offset_in_data=0, byte_offset_=0, dtype_=(FLOAT, 32, 1)):
    def edit(h):
        h.t.data = h.data_address + offset_in_data
        h.t.byte_offset = byte_offset_
        h.t.dtype = DLDataType(*dtype_)
    return edited()(edit)


case("misaligned-data-f32", BufferError, "not aligned to 4 bytes", view="float32")(
    misaligned(offset_in_data=1))
case("misaligned-offset-f64", BufferError, "not aligned to 8 bytes", view="float64")(
    misaligned(byte_offset_=4, dtype_=(FLOAT, 64, 1)))
case("aligned-view-accepted", view="float32", check=lambda values: values == [0.0] * 6)(
    misaligned())

# ---- deleters ----------------------------------------------------------------------------
case("deleter-null-valid", check=expect(shape=[2, 3]), deleter=False)(
    edited(deleter=None)(lambda h: None))
case("deleter-null-invalid", BufferError, "ndim is negative", deleter=False)(
    edited(deleter=None)(lambda h: setattr(h.t, "ndim", -1)))
case("deleter-raises-valid", check=expect(shape=[2, 3]), extra={"raises": True})(
    edited(deleter="raising")(lambda h: None))
# The deleter's exception (reported as unraisable) never replaces the import's own error.
case("deleter-raises-invalid", BufferError, "negative extent", extra={"raises": True})(
    edited(deleter="raising")(lambda h: h.set_shape([-3])))
case("deleter-raises-legacy", BufferError, "NULL", extra={"raises": True})(
    edited(versioned=False, deleter="raising")(lambda h: setattr(h.t, "data", None)))


# ---- producer objects (__dlpack__, __dlpack_device__) ------------------------------------

def producer(result, device=None, hostile=None):
    def build():
        h = hostile() if hostile else None
        r = result(h) if callable(result) and hostile else result
        return h, Producer(r, device)
    return build


case("dlpack-raises", ValueError, "boom", calls=1)(producer(ValueError("boom")))
# TypeError means "an older producer": retried once without the newer keywords, then raised.
case("dlpack-raises-typeerror", TypeError, "nope", calls=2)(producer(TypeError("nope")))
case("dlpack-returns-int", TypeError, "__dlpack__ did not return a capsule", calls=1)(
    producer(42))
case("dlpack-returns-none", TypeError, "did not return a capsule", calls=1)(producer(None))
case("dlpack-returns-ndarray", TypeError, "did not return a capsule", calls=1)(
    producer(np.zeros(3)))
case("dlpack-returns-wrong-name", TypeError, "named 'dltensor'", passed=False, calls=1)(
    producer(lambda h: h.capsule(b"not_dltensor"), hostile=Hostile))
case("dlpack-returns-used", ValueError, "already consumed", passed=False, calls=1,
     extra={"used": True})(
    producer(lambda h: h.capsule(b"used_dltensor_versioned"), hostile=Hostile))
case("dlpack-returns-malformed", BufferError, "ndim is negative", calls=1)(
    producer(lambda h: (setattr(h.t, "ndim", -2), h.capsule())[1], hostile=Hostile))


class NotCallable:
    __dlpack__ = 5


case("dlpack-not-callable", TypeError, "not callable")(lambda: (None, NotCallable()))


# The importer never needs __dlpack_device__ (it asks __dlpack__ for a device instead and
# checks the tensor's own device field), so a missing, junk, raising or lying one is ignored.
def with_device(device):
    return producer(lambda h: h.capsule(), device=device, hostile=Hostile)


def _raise():
    raise RuntimeError("device query failed")


case("device-method-missing", check=expect(device=(CPU, 0)), calls=1)(with_device(None))
case("device-method-junk", check=expect(device=(CPU, 0)), calls=1)(
    with_device(lambda: "cpu"))
case("device-method-raises", check=expect(device=(CPU, 0)), calls=1)(with_device(_raise))
case("device-method-lies", check=expect(device=(CPU, 0)), calls=1)(
    with_device(lambda: (2, 0)))


# ---- the test ----------------------------------------------------------------------------

def test_corpus_size():
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_malformed(c, monkeypatch):
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    h, obj = c.build()

    def run():
        if c.view:
            return ext.as_slice_values(obj, c.view)
        return ext.inspect(obj)

    if c.exc is None:
        info = run()
        if c.check:
            c.check(info)
    else:
        with pytest.raises(c.exc, match=c.match):
            run()
    if isinstance(obj, Producer) and c.calls is not None:
        assert len(obj.calls) == c.calls
    if h is None:
        return
    # Right after the import (and the drop of what it imported): once if ownership passed.
    expected = 1 if (c.passed and c.deleter) else 0
    assert h.deleted == expected
    if c.extra.get("raises"):
        assert [type(u.exc_value) for u in unraisable] == [RuntimeError]
        assert "hostile deleter raised" in str(unraisable[0].exc_value)
    restore = getattr(h, "extra_restore", None)
    if restore:
        restore()
        del h.extra_restore
    del obj, run, restore  # the restore closure holds the capsule too
    # Once the capsule is gone: still once if the consumer took it (the renamed capsule's
    # destructor must leave it alone); once through the destructor if nobody took it.
    by_destructor = 0 if (c.passed or c.extra.get("used")) else 1
    assert h.destructor_freed == by_destructor
    assert h.deleted == (expected + by_destructor if c.deleter else 0)


def test_null_deleter_capsule_is_renamed():
    # Ownership passes even without a deleter: the capsule is marked used.
    h = Hostile(deleter=None)
    cap = h.capsule()
    ext.inspect(cap)
    assert "used_dltensor_versioned" in repr(cap)
    with pytest.raises(ValueError, match="already consumed"):
        ext.inspect(cap)


def test_deleter_on_gil_free_thread_for_hostile_producer():
    # A ctypes deleter (Python code) called from a Rust thread that never held the GIL.
    hs = [Hostile() for _ in range(8)]
    ext.drop_on_threads([h.capsule() for h in hs], 4)
    assert [h.deleted for h in hs] == [1] * 8


# ---- a Rust keepalive whose Drop panics --------------------------------------------------

@pytest.mark.parametrize("consumer", by_peer(["numpy", "torch", "rust", "rust-thread"]))
def test_panicking_keepalive_through_consumers(consumer, capfd):
    before = ext.bombs_dropped()
    t = ext.panicking_tensor()
    if consumer == "numpy":
        a = np.from_dlpack(t)
        assert a.tolist() == [1, 2, 3, 4]
        del a
    elif consumer == "torch":
        a = torch.from_dlpack(t)
        assert a.tolist() == [1, 2, 3, 4]
        del a
    elif consumer == "rust":
        assert ext.to_bytes(t) == bytes([1, 2, 3, 4])
    else:
        ext.drop_on_threads([t], 1)
    del t
    collect()
    assert ext.bombs_dropped() == before + 1
    assert "a keepalive panicked while being dropped by a DLPack deleter" in capfd.readouterr().err


@pytest.mark.parametrize("versioned", [True, False])
def test_panicking_keepalive_through_capsule_destructor(versioned, capfd):
    before = ext.bombs_dropped()
    cap = ext.panicking_capsule(versioned)
    del cap  # nobody consumed it: the capsule destructor calls the deleter, which panics
    assert ext.bombs_dropped() == before + 1
    assert "keepalive panicked" in capfd.readouterr().err


@pytest.mark.parametrize("versioned", [True, False])
def test_panicking_keepalive_while_exception_pending(versioned, capfd):
    # The destructor runs while an exception is set and the keepalive panics inside it: the
    # pending exception must come out unchanged, the panic caught and reported.
    before = ext.bombs_dropped()
    assert ext.drop_capsule_with_exception_set(True, versioned) == (
        "ValueError",
        "pending from Rust",
    )
    assert ext.bombs_dropped() == before + 1
    assert "keepalive panicked" in capfd.readouterr().err
