"""Hostile DLPack producers built with ctypes, for the malformed-input corpus.

`Hostile` lays out a DLManagedTensor or DLManagedTensorVersioned by hand (any field may hold
any value), wraps it in a capsule of any name through `PyCapsule_New`, and counts how often
its deleter is called. The capsule's destructor behaves like a well-behaved producer's: it
calls the deleter only if no consumer renamed the capsule to a `used_` name (took it).

Nothing here is ever freed: every struct, shape and data buffer stays alive for the whole
process, so a consumer that called a deleter twice, or read after it, touches valid memory
and the double call shows up in the count instead of as a crash.
"""

import ctypes
from ctypes import (
    POINTER, CFUNCTYPE, Structure, c_char_p, c_int32, c_int64, c_uint8, c_uint16, c_uint32,
    c_uint64, c_void_p, py_object,
)

CPU = 1
INT, UINT, FLOAT, OPAQUE, BFLOAT, COMPLEX, BOOL = 0, 1, 2, 3, 4, 5, 6
FLOAT8_E4M3FN, FLOAT6_E2M3FN, FLOAT4_E2M1FN = 10, 15, 17
READ_ONLY, IS_COPIED, IS_SUBBYTE_TYPE_PADDED = 1, 2, 4


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


DELETER = CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", DELETER),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    ]


assert ctypes.sizeof(DLTensor) == 48
assert ctypes.sizeof(DLManagedTensor) == 64
assert ctypes.sizeof(DLManagedTensorVersioned) == 80
assert DLManagedTensorVersioned.dl_tensor.offset == 32

# A private handle on the interpreter's C API: the function objects of `ctypes.pythonapi` are
# shared process-wide, so setting their argtypes here would change them for every other module.
_api = ctypes.PyDLL(None)
_api.PyCapsule_New.restype = py_object
_api.PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]
# The destructor's argument is a capsule being deallocated (refcount 0): only raw pointers.
_api.PyCapsule_GetName.restype = c_void_p
_api.PyCapsule_GetName.argtypes = [c_void_p]
_api.PyCapsule_GetPointer.restype = c_void_p
_api.PyCapsule_GetPointer.argtypes = [c_void_p, c_void_p]
_api.PyErr_Clear.restype = None
_api.PyErr_Clear.argtypes = []

_by_address = {}  # struct address -> Hostile (kept alive forever, see the module doc)
_names = []  # capsule names must outlive their capsules


@DELETER
def _counting_deleter(address):
    _by_address[address].deleted += 1


@DELETER
def _raising_deleter(address):
    _by_address[address].deleted += 1
    raise RuntimeError("hostile deleter raised")


@CFUNCTYPE(None, c_void_p)
def _destructor(capsule):
    name = _api.PyCapsule_GetName(capsule)
    if name is None:
        _api.PyErr_Clear()
    elif ctypes.string_at(name).startswith(b"used_"):
        return  # a consumer took it and calls the deleter
    pointer = _api.PyCapsule_GetPointer(capsule, name)
    if not pointer:
        _api.PyErr_Clear()
        return
    h = _by_address.get(pointer)
    if h is not None:
        h.destructor_freed += 1
        if h.m.deleter:
            h.m.deleter(pointer)


class Hostile:
    """A hand-made producer: a valid 2x3 float32 tensor unless `edit` changes it.

    `versioned`: DLManagedTensorVersioned (version 1.3) or legacy DLManagedTensor.
    `deleter`: "counting" (default), "raising" (counts, then raises in the callback) or None.
    """

    def __init__(self, versioned=True, deleter="counting", shape=(2, 3), strides=(3, 1),
                 dtype=(FLOAT, 32, 1), nbytes=None):
        self.versioned = versioned
        self.deleted = 0  # deleter calls
        self.destructor_freed = 0  # of which by our capsule destructor (nobody took it)
        self.m = DLManagedTensorVersioned() if versioned else DLManagedTensor()
        if versioned:
            self.m.version = DLPackVersion(1, 3)
        if deleter == "counting":
            self.m.deleter = _counting_deleter
        elif deleter == "raising":
            self.m.deleter = _raising_deleter
        self.set_shape(shape)
        self.set_strides(strides)
        t = self.m.dl_tensor
        t.device = DLDevice(CPU, 0)
        t.dtype = DLDataType(*dtype)
        # 64-byte aligned data, large enough for the default tensor (and then some).
        size = nbytes if nbytes is not None else 256
        self._raw = ctypes.create_string_buffer(size + 64)
        self.data_address = (ctypes.addressof(self._raw) + 63) & ~63
        t.data = self.data_address
        self.address = ctypes.addressof(self.m)
        _by_address[self.address] = self

    @property
    def t(self):
        return self.m.dl_tensor

    def set_shape(self, shape, ndim=None):
        """Points `shape` at the given values (None: a NULL pointer); sets ndim to their count
        unless `ndim` is given."""
        if shape is None:
            self._shape = None
            self.m.dl_tensor.shape = None
        else:
            self._shape = (c_int64 * max(len(shape), 1))(*shape)
            self.m.dl_tensor.shape = ctypes.cast(self._shape, POINTER(c_int64))
        self.m.dl_tensor.ndim = ndim if ndim is not None else len(shape or ())

    def set_strides(self, strides):
        if strides is None:
            self._strides = None
            self.m.dl_tensor.strides = None
        else:
            self._strides = (c_int64 * max(len(strides), 1))(*strides)
            self.m.dl_tensor.strides = ctypes.cast(self._strides, POINTER(c_int64))

    def fill(self, data: bytes, offset=0):
        ctypes.memmove(self.data_address + offset, data, len(data))

    def capsule(self, name=None):
        """A capsule holding this tensor, named `name` (bytes; default: the DLPack name for
        this struct; False: an unnamed capsule)."""
        if name is None:
            name = b"dltensor_versioned" if self.versioned else b"dltensor"
        if name is False:
            name = None
        else:
            name = bytes(name)
            _names.append(name)
        return _api.PyCapsule_New(self.address, name, ctypes.cast(_destructor, c_void_p))


class Producer:
    """An object with `__dlpack__` returning `result()` (or raising it, if an exception),
    and optionally `__dlpack_device__`; records the keyword arguments of every call."""

    def __init__(self, result, device=None):
        self._result = result
        self.calls = []
        if device is not None:
            self.__dlpack_device__ = device

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        r = self._result() if callable(self._result) else self._result
        if isinstance(r, BaseException):
            raise r
        return r


def set_capsule_pointer(capsule, value):
    """Overwrites the pointer field inside a live capsule object, bypassing the C API (which
    refuses NULL): what a hostile extension could do. Returns the old value."""
    # PyCapsule: PyObject_HEAD (refcount, type), then `void *pointer`.
    field = c_void_p.from_address(id(capsule) + 2 * ctypes.sizeof(c_void_p))
    old = field.value
    field.value = value
    return old
