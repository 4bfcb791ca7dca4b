"""safetensors integration (dlpack-rs feature `safetensors`): a file written by the safetensors
package read through dlpack-rs (read into memory or mapped) by numpy, torch and jax, zero-copy
and read-only, compared with the package's own loaders; tensors of numpy and torch serialized
by dlpack-rs and loaded by the package."""

import numpy as np
import pytest

import dlpack_testext as ext
from conftest import NUMPY_VERSIONED, jnp, needs_jax, needs_safetensors, needs_torch, torch

pytestmark = needs_safetensors


def arrays():
    return {
        "weight": np.arange(12, dtype=np.float32).reshape(3, 4),
        "bias": np.array([-1.5, 2.25], dtype=np.float64),
        "ids": np.array([[1, 2], [3, 4]], dtype=np.int64),
        "mask": np.array([True, False, True]),
        "empty": np.zeros((0, 5), dtype=np.uint8),
    }


@pytest.fixture
def numpy_file(tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "weights.safetensors"
    save_file(arrays(), str(path))
    return path


@pytest.mark.parametrize("mapped", [False, True])
def test_numpy_reads_the_file_as_the_package_does(numpy_file, mapped):
    from safetensors.numpy import load_file

    ours = ext.st_open(str(numpy_file), mapped)
    theirs = load_file(str(numpy_file))
    assert sorted(ours) == sorted(theirs)
    for name, t in ours.items():
        assert t.read_only
        if not NUMPY_VERSIONED:
            continue  # numpy 2.0 asks for legacy capsules: read-only data is refused
        a = np.from_dlpack(t)
        assert not a.flags.writeable
        assert a.dtype == theirs[name].dtype and np.array_equal(a, theirs[name]), name
    if NUMPY_VERSIONED:
        w = np.from_dlpack(ours["weight"])
        assert np.from_dlpack(ours["weight"]).ctypes.data == w.ctypes.data  # one buffer, no copy


@needs_torch
def test_torch_reads_a_torch_file_through_us_as_safetensors_torch_does(tmp_path):
    from safetensors.torch import load_file, save_file

    tensors = {
        "w": torch.randn(4, 3),
        "h": torch.arange(6, dtype=torch.float16),
        "b": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "q": torch.tensor([0.5, -1.0], dtype=torch.float8_e4m3fn),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    ours = {n: torch.from_dlpack(t) for n, t in ext.st_open(str(path), True).items()}
    theirs = load_file(str(path))
    for name in tensors:
        assert ours[name].dtype == theirs[name].dtype, name
        assert torch.equal(ours[name].float(), theirs[name].float()), name


@needs_jax
def test_jax_reads_the_file(numpy_file):
    t = ext.st_open(str(numpy_file))["weight"]
    assert jnp.from_dlpack(t).tolist() == arrays()["weight"].tolist()


def test_imports_serialize_to_what_the_package_loads(tmp_path):
    from safetensors.numpy import load

    data = ext.st_serialize({n: a for n, a in arrays().items()})
    back = load(bytes(data))
    for name, a in arrays().items():
        assert back[name].dtype == a.dtype and np.array_equal(back[name], a), name


@needs_torch
def test_torch_tensors_serialize_and_come_back_zero_copy(tmp_path):
    t = {"x": torch.arange(5, dtype=torch.int32), "y": torch.ones(2, 2, dtype=torch.bfloat16)}
    path = tmp_path / "t.safetensors"
    path.write_bytes(bytes(ext.st_serialize(t)))
    back = {n: torch.from_dlpack(v) for n, v in ext.st_open(str(path)).items()}
    assert torch.equal(back["x"], t["x"]) and torch.equal(back["y"], t["y"])


@pytest.mark.parametrize("mapped", [False, True])
def test_strided_tensors_reserved_names_and_bad_files_are_refused(tmp_path, mapped):
    with pytest.raises(BufferError, match="contiguous"):
        ext.st_serialize({"t": np.arange(6.0).reshape(2, 3).T})
    with pytest.raises(ValueError, match="reserved for the header's metadata"):
        ext.st_serialize({"__metadata__": np.zeros(2, np.uint8)})
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x40\x00\x00\x00\x00\x00\x00\x00" + b"{" * 64)
    with pytest.raises(ValueError, match="(?i)json"):
        ext.st_open(str(bad), mapped)


@needs_torch
def test_a_consumer_that_ignores_read_only_never_reaches_the_mapped_file(numpy_file):
    # torch does not honour READ_ONLY: its write lands on a private copy of the page (no fault,
    # as a read-only mapping would give), and the file keeps its bytes.
    before = numpy_file.read_bytes()
    x = torch.from_dlpack(ext.st_open(str(numpy_file), True)["weight"])
    x.add_(1)
    assert x[0, 0].item() == 1.0
    assert numpy_file.read_bytes() == before


def test_a_borrow_conflict_is_buffer_error_as_everywhere():
    x = np.zeros(4, np.uint8)
    with pytest.raises(BufferError, match="mutably borrowed"):
        ext.st_serialize_while_writing(x)


def test_sub_byte_tensors_of_part_bytes_are_refused_naming_the_tensor():
    odd = ext.lp_make_packed("float4_e2m1fn", b"\0\0", [3])
    with pytest.raises(ValueError, match=r'tensor name "odd": sub-byte elements'):
        ext.st_serialize({"odd": odd})
