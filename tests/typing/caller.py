"""A typed caller of the image demo, checked by mypy against the stubs generated from the Rust
module (tests/typing/check.sh). Every call here type-checks except the one marked, which mypy
must reject: its `type: ignore[arg-type]` is required to be used (`--warn-unused-ignores`), so a
stub that accepted the wrong call fails the check. tests/typing/check.py also runs every function: the wrong call
raises TypeError at run time too."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
import torch.utils.dlpack

import image_demo


def luma_of_image(height: int, width: int) -> image_demo.DLPackArray:
    img = image_demo.Image(height, width)
    shape: tuple[int, int, int] = img.shape
    assert shape == (height, width, 3)
    capsule = img.__dlpack__(max_version=(1, 3), copy=False)
    assert capsule is not None
    device: tuple[int, int] = img.__dlpack_device__()
    assert device == (1, 0)
    return image_demo.grayscale(img)


def invert_numpy() -> int:
    arr = np.zeros((2, 3), dtype=np.uint8)
    count: int = image_demo.invert(arr)
    gray = image_demo.grayscale(np.zeros((2, 2, 3), dtype=np.uint8))
    back = np.from_dlpack(gray)
    return count + int(back.size)


def frameworks() -> int:
    # torch tensors and jax arrays are DLPack producers too (jax's stub `__dlpack__` takes no
    # argument: the argument protocol asks for nothing more).
    t = torch.zeros((2, 2, 3), dtype=torch.uint8)
    n: int = image_demo.invert(t)
    image_demo.grayscale(jnp.zeros((2, 2, 3), dtype=jnp.uint8))
    back = torch.utils.dlpack.from_dlpack(image_demo.grayscale(t))
    return n + int(back.numel())


def rejected() -> None:
    # A list has no __dlpack__: the stubs say so.
    image_demo.invert([1, 2, 3])  # type: ignore[arg-type]
