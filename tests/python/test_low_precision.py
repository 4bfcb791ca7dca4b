"""Low-precision element types end to end (dlpack-rs features `float8` and `half`): FP8 typed
(`float8::F8E4M3` = float8_e4m3fn, `F8E5M2` = float8_e5m2) and packed (the other FP8 codes),
FP4 in both packings (jax's float4_e2m1fn, 4 bits x 1 lane, two elements per byte; torch's
float4_e2m1fn_x2, 4 bits x 2 lanes, one byte per element) and bfloat16: Rust -> torch/jax ->
Rust round trips with values compared, hostile dtypes refused per code, wrong variants refused
with both names, and numpy's refusal of these types."""

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import jax, jnp, needs_jax, needs_torch, torch
from dlpack_ctypes import DLDataType, Hostile

VALUES = [0.5, 1.0, 1.5, 2.0, 3.0, -4.0, 0.25, 8.0, -0.75]
E8M0_VALUES = [0.5, 1.0, 2.0, 4.0, 8.0, 0.25, 1024.0]  # powers of two only, no sign

F8_TYPED = ["float8_e4m3fn", "float8_e5m2"]  # with a Rust element type (the float8 crate)
F8_TORCH = F8_TYPED + ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]
F8_JAX = F8_TORCH + ["float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz"]


def values_for(dtype):
    return E8M0_VALUES if dtype == "float8_e8m0fnu" else VALUES


def rust_f8(dtype, codes):
    """A Rust export of FP8 data: typed from floats where Rust has the type, else packed."""
    if dtype in F8_TYPED:
        return ext.lp_make_f8(dtype, values_for(dtype), None)
    return ext.lp_make_packed(dtype, codes, None)


# ---- FP8 with torch ----------------------------------------------------------------------

def torch_bytes(x):
    return bytes(x.view(torch.uint8).flatten().tolist())


@needs_torch
@pytest.mark.parametrize("dtype", F8_TORCH)
def test_fp8_rust_torch_rust(dtype):
    values = values_for(dtype)
    ref = torch.tensor(values).to(getattr(torch, dtype))
    codes = torch_bytes(ref)
    x = torch.from_dlpack(rust_f8(dtype, codes))
    assert x.dtype == getattr(torch, dtype) and x.shape == (len(values),)
    assert torch_bytes(x) == codes  # the bits torch itself makes for these values
    assert x.float().tolist() == values
    name, shape, raw, _ = ext.lp_read(x)  # torch -> Rust, packed view
    assert (name, shape, raw) == (dtype, [len(values)], codes)
    if dtype in F8_TYPED:
        assert ext.lp_values_f8(x, dtype) == values  # typed view of torch's memory
        y = torch.from_dlpack(ext.lp_copy_f8(x))  # torch -> Vec<F8..> -> torch
    else:
        y = torch.from_dlpack(ext.lp_copy_packed(x))
    assert y.dtype == x.dtype and torch_bytes(y) == codes
    assert y.data_ptr() != x.data_ptr()


@needs_torch
def test_fp8_typed_argument_and_2d_shape():
    x = torch.tensor(VALUES[:6]).to(torch.float8_e4m3fn).reshape(2, 3)
    assert ext.lp_sum_e4m3fn(x) == sum(VALUES[:6])
    t = torch.from_dlpack(ext.lp_make_f8("float8_e5m2", VALUES[:6], [3, 2]))
    assert t.shape == (3, 2) and t.float().flatten().tolist() == VALUES[:6]


@needs_torch
def test_wrong_fp8_variant_is_refused_with_both_names():
    x = torch.tensor(VALUES).to(torch.float8_e5m2)
    with pytest.raises(TypeError, match=r"expected a tensor of float8_e4m3fn, got float8_e5m2 "
                                        r"\(convert it first, e\.g\. x\.to\(torch\.float8_e4m3fn\)"):
        ext.lp_sum_e4m3fn(x)
    with pytest.raises(TypeError, match=r"dtype mismatch: expected a tensor of float8_e4m3fn, "
                                        r"got float8_e5m2 \(convert it first"):
        ext.lp_values_f8(x, "float8_e4m3fn")
    fnuz = torch.tensor(VALUES).to(torch.float8_e4m3fnuz)
    with pytest.raises(TypeError, match=r"expected a tensor of float8_e4m3fn, got float8_e4m3fnuz "):
        ext.lp_values_f8(fnuz, "float8_e4m3fn")


# ---- FP8 with jax ------------------------------------------------------------------------

def jax_bytes(x):
    return bytes(np.asarray(jax.lax.bitcast_convert_type(x, jnp.uint8)).tolist())


def jax_floats(x):
    return np.asarray(x.astype(jnp.float32)).tolist()


@needs_jax
@pytest.mark.parametrize("dtype", F8_JAX)
def test_fp8_rust_jax_rust(dtype):
    values = values_for(dtype)
    ref = jnp.array(values, dtype=getattr(jnp, dtype))
    codes = jax_bytes(ref)
    x = jnp.from_dlpack(rust_f8(dtype, codes))
    assert x.dtype == jnp.dtype(getattr(jnp, dtype)) and x.shape == (len(values),)
    assert jax_bytes(x) == codes
    assert jax_floats(x) == values
    name, shape, raw, _ = ext.lp_read(x)  # jax -> Rust
    assert (name, shape, raw) == (dtype, [len(values)], codes)
    if dtype in F8_TYPED:
        assert ext.lp_values_f8(x, dtype) == values
        y = jnp.from_dlpack(ext.lp_copy_f8(x))
    else:
        y = jnp.from_dlpack(ext.lp_copy_packed(x))
    assert y.dtype == x.dtype and jax_bytes(y) == codes


@needs_jax
def test_wrong_fp8_variant_from_jax_is_refused_with_both_names():
    x = jnp.array(VALUES, dtype=jnp.float8_e5m2fnuz)
    with pytest.raises(TypeError, match=r"expected a tensor of float8_e4m3fn, got float8_e5m2fnuz"):
        ext.lp_sum_e4m3fn(x)


# ---- FP4: torch's float4_e2m1fn_x2, jax's packed float4_e2m1fn ---------------------------

# FP4 e2m1 codes and their values; code 9 is -0.5, 15 is -6.
FP4_CODES = [1, 2, 3, 4, 5, 6, 7, 9, 15]
FP4_VALUES = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.5, -6.0]


@needs_torch
def test_fp4_x2_rust_torch_rust():
    data = ext.lp_pack("float4_e2m1fn_x2", FP4_CODES + [0])  # 10 values: 5 bytes, 5 elements
    assert data == bytes([0x21, 0x43, 0x65, 0x97, 0x0F])
    x = torch.from_dlpack(ext.lp_make_packed("float4_e2m1fn_x2", data, [5]))
    assert x.dtype == torch.float4_e2m1fn_x2 and x.shape == (5,)
    ref = torch.tensor(list(data), dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    assert torch_bytes(x) == torch_bytes(ref) == data
    name, shape, raw, values = ext.lp_read(x)
    assert (name, shape, raw, list(values)) == ("float4_e2m1fn_x2", [5], data, FP4_CODES + [0])
    y = torch.from_dlpack(ext.lp_copy_packed(ref.reshape(5, 1)))  # torch -> Rust bytes -> torch
    assert y.dtype == torch.float4_e2m1fn_x2 and y.shape == (5, 1) and torch_bytes(y) == data


@needs_jax
def test_fp4_packed_jax_rust_jax_odd_length():
    ref = jnp.array(FP4_VALUES, dtype=jnp.float4_e2m1fn)
    # What jax exports for 9 values: 5 bytes (ceil(9 * 4 / 8)), value 0 in the low nibble. The
    # unused high nibble of the last byte is not necessarily zero.
    name, shape, raw, values = ext.lp_read(ref)
    assert (name, shape, list(values)) == ("float4_e2m1fn", [9], FP4_CODES)
    assert len(raw) == 5 and raw[:4] == bytes([0x21, 0x43, 0x65, 0x97]) and raw[4] & 0xF == 0xF
    packed = ext.lp_pack("float4_e2m1fn", FP4_CODES)
    assert packed == bytes([0x21, 0x43, 0x65, 0x97, 0x0F])
    # jax 0.10 imports no float4 over DLPack, not even its own export ("PjRt CPU buffers only
    # support default layout"): the bytes go as uint8 and jax reinterprets them.
    t = ext.lp_make_packed("float4_e2m1fn", packed, [9])
    assert ext.lp_read(t)[:3] == ("float4_e2m1fn", [9], packed)
    with pytest.raises(Exception, match="only support default layout"):
        jnp.from_dlpack(t)
    with pytest.raises(Exception, match="only support default layout"):
        jnp.from_dlpack(ref)
    as_bytes = jnp.from_dlpack(ext.lp_make_packed("uint8", ext.lp_copy_bytes(ref), None))
    x = jax.lax.bitcast_convert_type(as_bytes, jnp.float4_e2m1fn).reshape(-1)[:9]
    assert jax_floats(x) == FP4_VALUES


def test_packed_export_needs_the_exact_byte_count():
    with pytest.raises(BufferError, match="9 packed elements need 5 bytes, the buffer has 6"):
        ext.lp_make_packed("float4_e2m1fn", bytes(6), [9])
    with pytest.raises(BufferError, match="9 packed elements need 9 bytes, the buffer has 5"):
        ext.lp_make_packed("float4_e2m1fn_x2", bytes(5), [9])


# ---- bfloat16 ------------------------------------------------------------------------------

@needs_torch
def test_bf16_rust_torch_rust_values():
    x = (torch.arange(10, dtype=torch.float32) * -0.375 + 1).to(torch.bfloat16)
    y = torch.from_dlpack(ext.hc_bf16_copy(x))
    assert y.dtype == torch.bfloat16 and y.float().tolist() == x.float().tolist()


@needs_jax
def test_bf16_rust_jax_rust_values():
    x = (jnp.arange(10, dtype=jnp.float32) * -0.375 + 1).astype(jnp.bfloat16)
    y = jnp.from_dlpack(ext.hc_bf16_copy(x))
    assert y.dtype == jnp.bfloat16 and jax_floats(y) == jax_floats(x)


# ---- hostile dtypes: one per code with a fixed form ----------------------------------------

HOSTILE = [  # (code, bits, lanes, the rule the message names)
    (4, 8, 1, "kDLBfloat must be 16 bits"),
    (6, 16, 1, "kDLBool must be 8 bits"),
    (7, 16, 1, "kDLFloat8_e3m4 must be 8 bits, 1 lane"),
    (8, 8, 2, "kDLFloat8_e4m3 must be 8 bits, 1 lane"),
    (9, 4, 1, "kDLFloat8_e4m3b11fnuz must be 8 bits, 1 lane"),
    (10, 8, 4, "kDLFloat8_e4m3fn must be 8 bits, 1 lane"),
    (11, 16, 1, "kDLFloat8_e4m3fnuz must be 8 bits, 1 lane"),
    (12, 8, 2, "kDLFloat8_e5m2 must be 8 bits, 1 lane"),
    (13, 6, 1, "kDLFloat8_e5m2fnuz must be 8 bits, 1 lane"),
    (14, 8, 0, "kDLFloat8_e8m0fnu must be 8 bits, 1 lane"),
    (15, 8, 1, "kDLFloat6_e2m3fn must be 6 bits, 1 lane"),
    (16, 6, 2, "kDLFloat6_e3m2fn must be 6 bits, 1 lane"),
    (17, 4, 4, r"kDLFloat4_e2m1fn must be 4 bits, 1 lane \(packed\) or 2 lanes \(x2\)"),
    (17, 8, 2, r"kDLFloat4_e2m1fn must be 4 bits"),
]


@pytest.mark.parametrize("code,bits,lanes,rule", HOSTILE,
                         ids=[f"code{c}-{b}x{l}" for c, b, l, _ in HOSTILE])
def test_hostile_dtype_is_refused(code, bits, lanes, rule):
    h = Hostile(shape=(4,), strides=(1,), dtype=(code, bits, lanes))
    capsule = h.capsule()  # held: its ctypes destructor must not run with the error pending
    with pytest.raises(BufferError, match=rf"invalid dtype: code .*bits {bits}, lanes {lanes} "
                                          rf"\({rule}"):
        ext.inspect(capsule)
    assert h.deleted == 1


def test_padded_sub_byte_data_is_refused():
    h = Hostile(shape=(5,), strides=(1,), dtype=(17, 4, 1))
    h.m.flags = 4  # IS_SUBBYTE_TYPE_PADDED
    capsule = h.capsule()
    with pytest.raises(BufferError, match="float4_e2m1fn .*IS_SUBBYTE_TYPE_PADDED"):
        ext.inspect(capsule)
    assert h.deleted == 1


@pytest.mark.parametrize("dtype,size", [("float4_e2m1fn", 3), ("float4_e2m1fn_x2", 5),
                                        ("float8_e8m0fnu", 5)])
def test_low_precision_imports_are_described(dtype, size):
    code, bits, lanes = {"float4_e2m1fn": (17, 4, 1), "float4_e2m1fn_x2": (17, 4, 2),
                         "float8_e8m0fnu": (14, 8, 1)}[dtype]
    h = Hostile(shape=(5,), strides=(1,), dtype=(code, bits, lanes))
    h.fill(bytes([0x21, 0x43, 0x65, 0x87, 0xA9]))
    name, shape, raw, _ = ext.lp_read(h.capsule())
    assert (name, shape, raw) == (dtype, [5], bytes([0x21, 0x43, 0x65, 0x87, 0xA9])[:size])


# ---- numpy -----------------------------------------------------------------------------------

def numpy_refuses(dtype):
    """Whether this numpy refuses `dtype` over DLPack: every numpy up to 2.4 refuses all of them;
    numpy 2.5 takes bfloat16 and the float8 types when ml_dtypes is installed (it names them),
    and still refuses packed float4."""
    if dtype == "float4_e2m1fn_x2":
        return True
    major, minor = (int(p) for p in np.__version__.split(".")[:2])
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        return True
    return (major, minor) < (2, 5)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float4_e2m1fn_x2", "bfloat16"])
def test_numpy_takes_low_precision_types_only_with_ml_dtypes(dtype):
    t = {"float8_e4m3fn": lambda: ext.lp_make_f8(dtype, VALUES, None),
         "float4_e2m1fn_x2": lambda: ext.lp_make_packed(dtype, bytes(4), None),
         "bfloat16": lambda: ext.hc_make(dtype, 4)}[dtype]()
    if numpy_refuses(dtype):
        # numpy's own error ("Unsupported dtype in DLTensor", "Unsupported lanes ..."): a
        # RuntimeError up to numpy 2.4, a BufferError from numpy 2.5.
        with pytest.raises((RuntimeError, BufferError), match="Unsupported (dtype|lanes) in DLTensor"):
            np.from_dlpack(t)
    else:
        assert np.from_dlpack(t).dtype.name == dtype


def test_returned_to_numpy_points_at_the_fix():
    if not numpy_refuses("float8_e4m3fn"):
        # This numpy takes the type: the hand-off succeeds, typed.
        assert ext.lp_hand_to(np.ndarray, VALUES).dtype.name == "float8_e4m3fn"
        return
    with pytest.raises(TypeError, match=r"numpy cannot import float8_e4m3fn over DLPack .*"
                                        r"torch\.from_dlpack or jax\.numpy\.from_dlpack") as e:
        ext.lp_hand_to(np.ndarray, VALUES)
    assert isinstance(e.value.__cause__, (RuntimeError, BufferError))


@needs_jax
@pytest.mark.parametrize("name", ["float6_e2m3fn", "float6_e3m2fn"])
def test_fp6_has_no_python_producer_yet(name):
    """FP6 (DLPack codes 15, 16) is covered by the Rust tests (`low_precision.rs`: packed views
    across byte boundaries, exact byte counts and borrow ranges) and the hostile-dtype cases
    here: torch 2.15 has no FP6 dtype, and jax 0.10 cannot make an FP6 array on the CPU. When
    this fails, jax can: add the Rust -> jax -> Rust round trip of FP6."""
    with pytest.raises(Exception, match="Invalid XLA PrimitiveType"):
        jnp.array([0.5, 1.0], dtype=getattr(jnp, name)).__dlpack__()
    assert not hasattr(torch, name) if torch is not None else True
