"""What dlpack-rs does, in one run: a Rust image shared with numpy and torch, numpy and torch
memory processed in place from Rust, aliasing refused, and a Rust result handed back, all
without copying pixels.

Run it after `maturin develop -m examples/image-demo/Cargo.toml` (tests/demo.sh does both).
"""

import gc

import numpy as np

import image_demo

try:
    import torch
except ImportError:  # torch is optional: the numpy half still shows everything
    torch = None


def ptr(x):
    return x.ctypes.data if isinstance(x, np.ndarray) else x.data_ptr()


img = image_demo.Image(4, 6)
print(f"rust image   : {img!r}, shape {img.shape}, pixels at {img.data_ptr:#x}")

# 1. Export: numpy (and torch) view the Rust pixels through __dlpack__, no copy.
a = np.from_dlpack(img)
print(f"numpy view   : shape {a.shape}, dtype {a.dtype}, strides {a.strides}, at {ptr(a):#x}")
assert ptr(a) == img.data_ptr, "numpy must see the Rust memory itself"
if torch is not None:
    t = torch.from_dlpack(img)
    print(f"torch view   : shape {tuple(t.shape)}, dtype {t.dtype}, stride {t.stride()}, at {ptr(t):#x}")
    assert ptr(t) == ptr(a)
print("shared memory:", ptr(a) == img.data_ptr)

# 2. Import + in place: Rust inverts a strided view (every other column) of numpy's own memory ...
b = np.array(a)  # a numpy-owned copy of the pixels
t_b = torch.from_numpy(b) if torch is not None else None  # torch shares numpy's memory
before = b.copy()
n = image_demo.invert(b[:, ::2])
print(f"rust inverted {n} values of b[:, ::2] in place (numpy strides {b[:, ::2].strides})")
assert np.array_equal(b[:, ::2], 255 - before[:, ::2]) and np.array_equal(b[:, 1::2], before[:, 1::2])
# ... and the change is visible everywhere the memory is shared.
if torch is not None:
    assert torch.equal(t_b, torch.from_numpy(b))
    print("torch sees the change:", bool(t_b[0, 0, 0] == 255 - int(before[0, 0, 0])))
    # Rust also writes into torch's own memory, whatever produced it.
    x = torch.zeros(2, 3, dtype=torch.uint8)
    image_demo.invert(x.t())
    print("rust inverted a torch tensor in place:", x.tolist())
    assert x.eq(255).all()
# The Rust image's own pixels stay readable by Rust (`&self.pixels`) while numpy views them,
# so Rust refuses to write them through an import: the borrow registry says BufferError.
try:
    image_demo.invert(a)
    raise AssertionError("a mutable import of the Rust image's memory must be refused")
except BufferError as e:
    print("rust refuses to write the Rust image through numpy's view:", e)

# 3. Round trip: numpy -> Rust (grayscale into a new Rust array) -> numpy again, and torch ->
#    Rust -> torch: the result comes back as the caller's own kind of array, without a copy.
gray = image_demo.grayscale(a)
expected = a @ np.array([0.299, 0.587, 0.114])
print(f"round trip   : {a.shape} {a.dtype} -> rust grayscale -> {type(gray).__name__} {gray.shape} {gray.dtype}")
assert isinstance(gray, np.ndarray)
assert np.abs(gray - expected).max() <= 0.5 + 1e-3  # rounded luma
if torch is not None:
    tg = image_demo.grayscale(torch.from_numpy(a))
    assert isinstance(tg, torch.Tensor) and np.array_equal(tg.numpy(), gray)
    print("torch in, torch out:", type(tg).__name__, tuple(tg.shape))
# The signature states the contract: three channels, uint8.
try:
    image_demo.grayscale(np.zeros((2, 2, 4), dtype=np.uint8))
    raise AssertionError("a 4-channel image must be refused")
except TypeError as e:
    print("rust refuses a 4-channel image:", e)

# 4. Lifetimes: the Rust pixels outlive the Python `Image` object while a view exists.
del img
gc.collect()
print("after `del img`, numpy still reads the Rust pixels:", a[0, -1].tolist())
print("image-demo: OK")
