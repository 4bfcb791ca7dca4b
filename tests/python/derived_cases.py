"""The derived classes of tests/pyext/src/derived.rs as test cases, shared by test_derived*.py:
each case makes one value and the numpy array it must read as; and how each consumer (numpy,
torch, jax) takes one.
"""

import numpy as np

import dlpack_testext as ext
from conftest import NUMPY_DTYPES, jnp, sample, torch

GENERIC_DTYPES = ["uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]
ALIGNED_KINDS = {"typed", "signal", "generic"}  # a 64-byte aligned user Buffer as data


# ---------------------------------------------------------------------------------------------
# The cases: name -> (make() -> (object, expected numpy array, dtype name), kind)


def _image():
    return ext.derived_image(2, 3, 4), (np.arange(24) % 256).astype(np.uint8).reshape(2, 3, 4)


def _vector():
    v = [0.5, -1.25, 3.0, 7.75, -0.0]
    return ext.derived_vector(v), np.array(v, dtype=np.float32)


def _transposed():
    return ext.derived_transposed(2, 3), np.arange(6, dtype=np.float32).reshape(2, 3).T


def _window():
    return ext.derived_window(10, 3, 4), np.arange(3, 7, dtype=np.float64)


def _signal():
    v = sample("float64", (2, 3))
    return ext.DerivedSignal(v.ravel().tolist(), [2, 3]), v


def _typed(dtype, shape=(2, 3)):
    def make():
        a = np.ascontiguousarray(sample(dtype, shape))
        return ext.derived_typed(a.tobytes(), dtype, list(shape)), a

    return make


def _generic(dtype, shape=(3, 4)):
    def make():
        return ext.derived_generic(dtype, list(shape)), sample(dtype, shape)

    return make


CASES = {
    "image": (_image, "uint8", "image"),
    "vector": (_vector, "float32", "vector"),
    "transposed": (_transposed, "float32", "transposed"),
    "window": (_window, "float64", "window"),
    "signal": (_signal, "float64", "signal"),
    **{f"typed-{d}": (_typed(d), d, "typed") for d in NUMPY_DTYPES + ["bfloat16"]},
    **{f"generic-{d}": (_generic(d), d, "generic") for d in GENERIC_DTYPES},
}
# Classes whose `__dlpack__` comes from the derive or the one-line delegation (not the
# ready-made `dlpack_rs.Tensor` the generic struct is moved into).
CLASS_CASES = ["image", "vector", "transposed", "window", "signal", "typed-float32"]


def element_strides(a):
    return tuple(s // a.itemsize for s in a.strides)


def source_ptr(obj):
    """Address of the first element, as our own importer sees the export (no copy)."""
    return ext.inspect(obj)["data_ptr"]


def to_numpy(x, dtype):
    """The values of a torch tensor or jax array as numpy (bfloat16 as uint16 bits)."""
    if torch is not None and isinstance(x, torch.Tensor):
        if dtype == "bfloat16":
            return x.view(torch.int16).numpy().view(np.uint16)
        return x.numpy()
    a = np.asarray(x)
    return a.view(np.uint16) if dtype == "bfloat16" else a


def consume(consumer, obj):
    """(consumer's array, its first-element address, its element strides, its dtype name)."""
    if consumer == "numpy":
        a = np.from_dlpack(obj)
        return a, a.ctypes.data, element_strides(a), a.dtype.name
    if consumer == "torch":
        x = torch.from_dlpack(obj)
        return x, x.data_ptr(), tuple(x.stride()), str(x.dtype).removeprefix("torch.")
    j = jnp.from_dlpack(obj)
    return j, j.unsafe_buffer_pointer(), None, j.dtype.name

