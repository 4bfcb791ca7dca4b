"""dlpack-rs and rust-numpy in one extension: their borrows of a numpy array see each other
(rust-numpy's shared borrow table, `_RUST_NUMPY_BORROW_CHECKING_API`)."""

import subprocess
import sys

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import needs_numpy_versioned, needs_torch, torch

# rust-numpy raises its own error for a conflict on its side; ours is BufferError.
CONFLICT = (BufferError, TypeError, RuntimeError)


def _fresh(code, timeout=120):
    """Runs `code` in a fresh interpreter (no table published yet), which must exit 0."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@needs_numpy_versioned
@pytest.mark.parametrize("f", ["np_rw_then_tensor_mut", "tensor_mut_then_np_rw"])
def test_two_mutable_views_of_one_array_are_refused_in_both_orders(f):
    x = np.zeros(4, dtype=np.float32)
    with pytest.raises(CONFLICT):
        getattr(ext, f)(x, x)
    # Whatever ran before the refusal, the borrows are released: each crate alone may write.
    y = np.zeros(4, dtype=np.float32)
    getattr(ext, f)(y[:2], y[2:])  # disjoint windows of one base
    assert y.tolist() == [1.0, 0.0, 1.0, 0.0]
    getattr(ext, f)(x[:2], x[2:])
    assert x[0] == 1.0 and x[2] == 1.0


@needs_numpy_versioned
def test_our_refusal_is_a_buffer_error():
    x = np.zeros(4, dtype=np.float32)
    with pytest.raises(BufferError, match="already borrowed"):
        ext.np_rw_then_tensor_mut(x, x)
    with pytest.raises(BufferError, match="already borrowed"):
        ext.np_ro_then_as_mut_slice(x, x)
    assert x.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_arrays_of_other_dtypes_are_keyed_by_their_element_size():
    # An object array's element size is not fixed by a built-in number type: our table asks
    # numpy for it. Its borrows conflict exactly where their bytes meet.
    x = np.array([object(), 1, "a"], dtype=object)
    assert ext.np_rw_object_then_np_ro_object(x, x.copy()) == 3
    with pytest.raises(CONFLICT):
        ext.np_rw_object_then_np_ro_object(x, x)
    base = np.empty(4, dtype=object)
    assert ext.np_rw_object_then_np_ro_object(base[:2], base[2:]) == 2
    with pytest.raises(CONFLICT):
        ext.np_rw_object_then_np_ro_object(base[:3], base[2:])
    assert ext.np_rw_object_then_np_ro_object(base[:3], base[3:]) == 1
    # datetime64 is not a built-in number type either: its 8 bytes meet a uint8 view of any of
    # them (an element size read too small would miss the bytes past its first).
    buf = np.zeros(16, np.uint8)
    seconds = buf.view("M8[s]")[:1]
    with pytest.raises(CONFLICT):
        ext.np_rw_seconds_then_np_rw_u8(seconds, buf[7:8])
    assert ext.np_rw_seconds_then_np_rw_u8(seconds, buf[8:9]) == 0


def test_shared_views_of_both_crates_coexist():
    x = np.arange(4, dtype=np.float32) + 1
    assert ext.np_ro_and_tensor_ref(x, x) == 2.0
    assert ext.np_ro_and_tensor_ref(x, x) == 2.0  # released, taken again


@needs_numpy_versioned
def test_rust_numpy_sees_our_exclusive_view():
    x = np.zeros(3, dtype=np.float32)
    with pytest.raises(CONFLICT):
        ext.tensor_mut_then_np_ro(x, x)
    # A view of another base is unaffected.
    assert ext.tensor_mut_then_np_ro(x, np.ones(3, np.float32)) == 1.0


@needs_numpy_versioned
def test_overlapping_slices_of_one_base_conflict_across_crates():
    base = np.zeros(8, dtype=np.float32)
    with pytest.raises(CONFLICT):
        ext.np_rw_then_tensor_mut(base[0:5], base[4:8])
    with pytest.raises(CONFLICT):
        ext.tensor_mut_then_np_rw(base[0:5], base[4:8])


@needs_torch
@needs_numpy_versioned
def test_torch_alias_of_numpy_memory_is_outside_rust_numpys_table():
    # rust-numpy keys by numpy objects: a torch tensor over the same memory is invisible to it,
    # but this crate's own registry (keyed by addresses) still sees ours.
    x = np.zeros(4, dtype=np.float32)
    t = torch.from_numpy(x)
    with pytest.raises(BufferError, match="already borrowed"):
        ext.alias_views(x, t, "mut-mut")


@needs_numpy_versioned
def test_the_table_this_crate_publishes_when_first_keeps_rust_numpys_rules():
    # In a fresh interpreter this crate needs the table before rust-numpy does: it publishes its
    # own (version 1), which rust-numpy then uses.
    import subprocess
    import sys

    code = """
import numpy as np, dlpack_testext as ext
x = np.zeros(8, dtype=np.float32)
ext.add_one(x)                        # ours first: publishes the table
from numpy._core import multiarray
assert type(multiarray._RUST_NUMPY_BORROW_CHECKING_API).__name__ == "PyCapsule"
out = []
for f in (ext.np_rw_then_tensor_mut, ext.tensor_mut_then_np_rw):
    for a, b in ((x, x), (x[0:5], x[4:8]), (x[2:6], x[0:3])):
        try:
            f(a, b)
            out.append("ok")
        except (BufferError, TypeError, RuntimeError):
            out.append("refused")
    f(x[0:4], x[4:8])                 # disjoint windows of one base
out.append(ext.np_ro_and_tensor_ref(x, x))
out.append(ext.tensor_mut_then_np_ro(np.zeros(1, np.float32), x))
print(out, x.tolist())
"""
    r = _fresh(code)
    out, values = r.stdout.split("] [")
    assert out + "]" == str(["refused"] * 6 + [6.0, 3.0])
    # add_one, then two writes to x[0] and x[4] by the disjoint calls; refused calls wrote nothing.
    assert "[" + values.strip() == str([3.0, 1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0])


@needs_numpy_versioned
def test_a_borrow_is_released_under_the_key_it_was_taken_with():
    # Python may change an array's shape and strides in place while a view of its import
    # lives (rust-numpy's table keys borrows by them): releasing that view must not give back
    # another view's borrow. Here x's new layout has the key of w's borrow; once x's view is
    # released, z (inside w, outside x's old range) must still be refused a mutable view.
    import warnings

    b = np.zeros(12, dtype=np.float32)
    x, w, z = b[:6], b[:11], b[6:11]

    def change():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # numpy >= 2.4
            x.shape = (2, 3)
            x.strides = (32, 4)  # spans b[0:11], as w does

    granted = ext.release_after_change_then_np_rw(x, w, z, change)
    assert not granted, "rust-numpy granted a mutable view of memory our shared view reads"


@needs_numpy_versioned
@pytest.mark.parametrize("first", ["ours", "rust-numpy"])
def test_a_typed_argument_releases_under_the_key_it_was_taken_with(first):
    # As test_a_borrow_is_released_under_the_key_it_was_taken_with, for typed arguments, which
    # view a numpy array through its own struct (no import): with either table published.
    start = "ext.add_one(np.zeros(1, np.float32))" if first == "ours" else (
        "z = np.arange(3, dtype=np.float32); ext.np_ro_and_tensor_ref(z, z)")
    code = f"""
import warnings
import numpy as np, dlpack_testext as ext
{start}
b = np.zeros(12, dtype=np.float32)
x, w, z = b[:6], b[:11], b[6:11]
def change():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        x.shape = (2, 3)
        x.strides = (32, 4)
print(ext.typed_release_after_change_then_np_rw(x, w, z, change))
"""
    r = _fresh(code)
    assert r.stdout.strip() == "False", "rust-numpy granted a mutable view of memory we read"


@needs_numpy_versioned
@pytest.mark.parametrize("first", ["ours", "rust-numpy"])
def test_a_0d_array_borrows_its_element(first):
    # A 0-d array holds one element: its borrow covers that element's bytes, so a mutable view
    # of a 1-element window of the same base conflicts with it, whichever table is in use (the
    # one this crate publishes when first, or rust-numpy's, which gives 0-d arrays an empty
    # range).
    import subprocess
    import sys

    start = "ext.add_one(x)" if first == "ours" else "ext.np_ro_and_tensor_ref(x, x)"
    code = f"""
import numpy as np, dlpack_testext as ext
x = np.zeros(4, dtype=np.float32)
{start}                               # publishes the table
out = []
for a, b in ((x[0:1], x[0, ...]), (x[1:3], x[2, ...]), (x[0:1], x[1, ...])):
    try:
        ext.np_rw_then_as_mut_slice(a, b)
        out.append("ok")
    except (BufferError, TypeError, RuntimeError):
        out.append("refused")
print(out)
"""
    r = _fresh(code)
    assert r.stdout.strip() == str(["refused", "refused", "ok"])


def test_a_view_on_another_thread_works_when_the_joiner_detaches():
    # A view of a numpy import on a thread that is not attached attaches to take rust-numpy's
    # borrow: the joiner releases the GIL while it waits (SAFETY.md). A joiner that kept the GIL
    # would wait for good (a known limitation: rust-numpy's table must be called attached).
    import subprocess
    import sys

    code = """
import numpy as np, dlpack_testext as ext
print(ext.view_on_joined_thread(np.ones(3, np.float32)))
"""
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: the viewing thread waits for the GIL its joiner holds")
    assert r.returncode == 0 and r.stdout.strip() == "1.0", r.stderr[-3000:]


@needs_numpy_versioned
def test_a_numpy_import_wrapped_in_our_tensor_keeps_rust_numpys_borrows():
    # A numpy import re-exported as a dlpack_rs.Tensor still views numpy's memory: an import of
    # the wrapper (through its exchange table, or its __dlpack__) and a typed argument of it take
    # rust-numpy's borrow of the array too (found in review: both were granted beside a
    # PyReadwriteArray of the same array).
    x = np.arange(4, dtype=np.float32)
    wrapped = ext.reexport(x)
    with pytest.raises(CONFLICT):
        ext.dunder_mut_then_np_rw(wrapped, x)
    with pytest.raises(CONFLICT):
        ext.tensor_mut_then_np_rw(wrapped, x)
    with pytest.raises(CONFLICT):
        ext.np_rw_then_tensor_mut(x, wrapped)
    with pytest.raises(CONFLICT):
        ext.tensor_ref_then_np_rw(wrapped, x)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    # Shared views of both crates still coexist, and everything was released.
    assert ext.np_ro_and_tensor_ref(x, wrapped) == 0.0
    ext.np_rw_then_tensor_mut(x[:2], x[2:])
    assert x.tolist() == [1.0, 1.0, 3.0, 3.0]


@needs_numpy_versioned
def test_a_writebackifcopy_array_keeps_its_key_when_numpy_resolves_it():
    # numpy sets the base of a WRITEBACKIFCOPY array to None when it resolves it (nditer.close,
    # ufuncs with out= of another dtype): a borrow keyed by the old base at import must still
    # meet rust-numpy's borrows keyed after (both were granted beside each other, found in
    # review).
    import subprocess
    import sys

    code = """
import numpy as np, dlpack_testext as ext
ext.add_one(np.zeros(1, np.float32))  # ours first: publishes the table
a = np.zeros(4, np.float64)
it = np.nditer(a, op_flags=[["readwrite", "updateifcopy"]], op_dtypes=[np.float32],
               casting="same_kind")
tmp = it.operands[0]
wrapped = ext.reexport(tmp)
it.close()
out = []
for f, args in ((ext.tensor_mut_then_np_rw, (wrapped, tmp)),
                (ext.np_rw_then_tensor_mut, (tmp, wrapped)),
                (ext.tensor_ref_then_np_rw, (wrapped, tmp))):
    try:
        f(*args)
        out.append("granted")
    except (BufferError, TypeError, RuntimeError):
        out.append("refused")
print(out)
"""
    r = _fresh(code)
    assert r.stdout.strip() == str(["refused"] * 3)


@needs_numpy_versioned
@pytest.mark.parametrize("first", ["ours", "rust-numpy"])
def test_a_0d_array_conflicts_with_rust_numpys_own_view_of_it(first):
    # rust-numpy keys a 0-d array by an empty range; with its table in use, our borrow of the
    # same array must still meet its borrows (granted beside each other, found in review).
    import subprocess
    import sys

    start = "ext.add_one(np.zeros(1, np.float32))" if first == "ours" else (
        "z = np.arange(3, dtype=np.float32); ext.np_ro_and_tensor_ref(z, z)")
    code = f"""
import numpy as np, dlpack_testext as ext
{start}
x = np.array(1.0, dtype=np.float32)
out = []
for f in (ext.np_rw_dyn_then_tensor_mut, ext.tensor_mut_then_np_ro_dyn,
          ext.tensor_ref_then_np_rw_dyn):
    try:
        f(x, x)
        out.append("granted")
    except (BufferError, TypeError, RuntimeError):
        out.append("refused")
print(out, float(x))
"""
    r = _fresh(code)
    assert r.stdout.strip() == str(["refused"] * 3) + " 1.0"


_WIDTHS = """
import numpy as np
import dlpack_testext as ext
if {ours_first}:
    ext.as_slice_values(np.zeros(1, np.float32), "float32")  # our import publishes the table
else:
    ext.np_ro_and_tensor_ref(np.zeros(1, np.float32), np.zeros(1, np.float32))  # rust-numpy's
for f in {fs!r}:
    x = np.zeros(16, dtype=np.uint8)
    call = (lambda a, b: getattr(ext, f)(b, a)) if f.startswith("tvm") else getattr(ext, f)
    try:
        print(f, "granted", call(x.view(np.int32), x[1::4]))
    except (BufferError, TypeError, RuntimeError) as e:
        print(f, "refused")
    # Disjoint bytes of one base stay granted.
    y = np.zeros(16, dtype=np.uint8)
    print(f, "disjoint", call(y[:8].view(np.int32), y[8:]), y.tolist())
"""


@needs_numpy_versioned
@pytest.mark.parametrize("ours_first", [False, True])
def test_borrows_of_another_element_width_meet_rust_numpys(ours_first):
    # rust-numpy's rule compares the gcd of the strides with the distance between the data
    # pointers, ignoring element width: an int32 view of 16 bytes and every fourth byte from
    # the second never "conflict" there. Our views describe themselves to its table as their
    # bytes (gcd 1), and our own implementation of the table decides by bytes.
    fs = ["np_rw_i32_then_tvm_u8", "tvm_u8_then_np_rw_i32"]
    if ours_first:
        fs.append("np_rw_i32_then_np_rw_u8")  # rust-numpy's own pair, in our table
    r = _fresh(_WIDTHS.format(ours_first=ours_first, fs=fs), timeout=300)
    lines = r.stdout.splitlines()
    for f in fs:
        assert f"{f} refused" in lines, r.stdout
        assert f"{f} disjoint 0 " + str([0] * 8 + [255] + [0] * 7) in lines, r.stdout


_ZERO_D_AT_FIRST = """
import numpy as np
import dlpack_testext as ext
if {ours_first}:
    ext.as_slice_values(np.zeros(1, np.float32), "float32")
else:
    ext.np_ro_and_tensor_ref(np.zeros(1, np.float32), np.zeros(1, np.float32))
out = []
for zero_d in (lambda x: x[0, ...], lambda x: x[0:1].reshape(())):
    for f in ("np_rw_dyn_then_tensor_mut", "tensor_mut_then_np_ro_dyn"):
        x = np.zeros(4, np.float32)
        args = (zero_d(x), x) if f.startswith("np") else (x, zero_d(x))
        try:
            getattr(ext, f)(*args)
            out.append("granted")
        except (BufferError, TypeError, RuntimeError):
            out.append("refused")
print(out)
"""


@needs_numpy_versioned
@pytest.mark.parametrize("ours_first", [False, True])
def test_rust_numpys_0d_view_at_our_first_element_conflicts(ours_first):
    # rust-numpy's table gives a 0-d array an empty range, which meets no range starting at its
    # element: our views also borrow their first byte as a 0-d array there.
    r = _fresh(_ZERO_D_AT_FIRST.format(ours_first=ours_first), timeout=300)
    assert r.stdout.strip() == str(["refused"] * 4)


_TWO_BASES = """
import numpy as np, dlpack_testext as ext
ext.add_one(np.zeros(1, np.float32))  # ours first: publishes the table
buf = bytearray(16)
x = np.frombuffer(memoryview(buf), np.float32)  # two numpy arrays of one buffer, whose bases
y = np.frombuffer(memoryview(buf), np.float32)  # (two memoryviews) rust-numpy keys apart
assert x.base is not y.base
out = []
for f in (ext.np_rw_then_tensor_mut, ext.tensor_mut_then_np_rw):
    try:
        f(x, y)
        out.append("granted")
    except (BufferError, TypeError, RuntimeError):
        out.append("refused")
print(out, bytes(buf) == bytes(16))
"""


@needs_numpy_versioned
def test_arrays_of_one_buffer_under_two_bases_with_our_table():
    # With this crate's table, rust-numpy's borrows are the borrow registry's, which decides by
    # bytes: rust-numpy's mutable view of one array and ours of another over the same bytes are
    # refused in both orders, whatever their bases (found in review: with a table of its own,
    # keyed by base as rust-numpy's, both were granted, and both wrote). With rust-numpy's own
    # table first, its keys cannot see the second base (SAFETY.md: outside the model).
    r = _fresh(_TWO_BASES)
    assert r.stdout.strip() == "['refused', 'refused'] True"


# The start of the scenarios below: this crate's table published first, in-place strides allowed.
_OURS_FIRST_STRIDES = """
import warnings
warnings.simplefilter("ignore", DeprecationWarning)  # in-place strides (numpy >= 2.4)
import numpy as np, dlpack_testext as ext
ext.numel(np.zeros(1, np.float32))  # ours first: publishes the table
"""


# rust-numpy's shared borrow of y lives while our argument extraction calls Outer.__dlpack__;
# inside it, another call borrows x, whose strides Inner.__dlpack__ then changes so that x's key
# becomes y's. Releasing x must give back x's borrow, not y's: else rust-numpy's mutable view of
# z (inside y) is granted while y is read.
_RELEASE_BY_ARRAY = _OURS_FIRST_STRIDES + """
base = np.zeros(8, np.float32)
y, x, z = base[1:5], base[4:8], base[1:4]
out = []
class Inner:
    def __dlpack__(self, **kw):
        x.strides = (-4,)  # x now addresses y's bytes
        return np.zeros(1, np.float32).__dlpack__(**kw)
    def __dlpack_device__(self):
        return (1, 0)
class Outer:
    def __dlpack__(self, **kw):
        try:
            ext.np_ro_and_tensor_ref(x, Inner())  # x is not contiguous after the change
        except TypeError:
            pass
        try:
            ext.np_rw_then_tensor_mut(z, np.zeros(1, np.float32))
            out.append("granted")
        except (BufferError, TypeError):  # rust-numpy refuses with TypeError
            out.append("refused")
        return np.zeros(1, np.float32).__dlpack__(**kw)
    def __dlpack_device__(self):
        return (1, 0)
ext.np_ro_and_tensor_ref(y, Outer())
print(out, base.tolist())
"""


@needs_numpy_versioned
def test_a_release_gives_back_its_own_arrays_borrow_after_a_layout_change():
    # Found in review: releases matched by the key recomputed from the array's layout, so x's
    # release gave back y's registry borrow (a shared one rust-numpy still held).
    r = _fresh(_RELEASE_BY_ARRAY)
    assert r.stdout.strip() == "['refused'] " + str([0.0] * 8)


def test_rust_numpys_resize_gives_its_borrow_back_and_takes_it_again():
    # rust-numpy's resize releases under the array (whose layout numpy just changed) and
    # acquires again, unwrapping the answer: found in review, the release missed the borrow
    # taken under the old layout, which then refused the new one (a panic in rust-numpy).
    code = """
import numpy as np, dlpack_testext as ext
ext.numel(np.zeros(1, np.float32))  # ours first: publishes the table
print(ext.np_rw_resize(2))
"""
    r = _fresh(code)
    assert r.stdout.strip() == "2"


# Two shared borrows of one array x, taken under two layouts: #1 by the outer call (x addresses
# base[0:4]), #2 by the inner call after Outer.__dlpack__ set x's strides to 0 (base[0] only);
# Inner.__dlpack__ sets them back before #2 is released. With #1 live, rust-numpy's mutable view
# of base[2] must be refused, and once both are released nothing of base stays borrowed.
_TWO_SHARED_LAYOUTS = _OURS_FIRST_STRIDES + """
base = np.zeros(8, np.float32)
x, z = base[0:4], base[2:3]
out = []
class Inner:
    def __dlpack__(self, **kw):
        x.strides = (4,)
        return np.zeros(1, np.float32).__dlpack__(**kw)
    def __dlpack_device__(self):
        return (1, 0)
class Outer:
    def __dlpack__(self, **kw):
        x.strides = (0,)
        ext.np_ro_and_tensor_ref(x, Inner())
        try:
            ext.np_rw_then_tensor_mut(z, np.zeros(1, np.float32))
            out.append("granted")
        except (BufferError, TypeError):  # rust-numpy refuses with TypeError
            out.append("refused")
        return np.zeros(1, np.float32).__dlpack__(**kw)
    def __dlpack_device__(self):
        return (1, 0)
ext.np_ro_and_tensor_ref(x, Outer())
ext.np_rw_then_tensor_mut(base, np.zeros(1, np.float32))  # both given back
print(out, base.tolist())
"""


@needs_numpy_versioned
def test_shared_borrows_of_one_array_under_two_layouts_go_back_together():
    # Found in review: a release took the borrow whose key matched the array's present layout,
    # which was the one still in use (rust-numpy's own table aborts the process here).
    r = _fresh(_TWO_SHARED_LAYOUTS)
    assert r.stdout.strip() == "['refused'] " + str([1.0] + [0.0] * 7)
