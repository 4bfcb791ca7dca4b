"""
The native module; `image_demo/__init__.py` re-exports it. Declared inline, so that
`maturin generate-stubs` (feature `stubs`) can read what it holds.
"""

from image_demo._dlpack import DLPackArray, DLPackMethod, SupportsDLPack
from typing import Any, Final, SupportsIndex, final
from typing_extensions import CapsuleType

__all__ = ["Image", "Tensor", "grayscale", "invert"]

@final
class Image:
    """
    An `height x width x 3` RGB image of `uint8` pixels, owned by Rust.

    `frozen`: Python gets no `&mut self` method that could reallocate the pixels while a
    consumer holds a pointer into them. (Consumers may still write through their view, which
    is the point of sharing memory.)
    """
    __dlpack__: Final[DLPackMethod]
    """
    Exports the data as a DLPack capsule (added by dlpack-rs).
    """
    __dlpack_c_exchange_api__: Final[CapsuleType]
    def __dlpack_device__(self, /) -> tuple[int, int]:
        """
        `(device_type, device_id)` of the data (added by dlpack-rs).
        """
    def __new__(cls, /, height: SupportsIndex, width: SupportsIndex) -> Image:
        """
        A test pattern: red grows along x, green along y, blue is constant.
        """
    def __repr__(self, /) -> str: ...
    @property
    def data_ptr(self, /) -> int:
        """
        The address of the first pixel (compare with `ndarray.ctypes.data` or
        `tensor.data_ptr()` to see that the memory is shared).
        """
    @property
    def shape(self, /) -> tuple[int, int, int]:
        """
        `(height, width, 3)`.
        """

@final
class Tensor:
    """
    An owned tensor exposed to Python as `dlpack_rs.Tensor`, which any DLPack consumer takes.

    Made from a `ManagedTensorVersioned`, a `ManagedTensor`, an `Export`, or an imported
    `PyTensor` (to hand it on). Each `__dlpack__` export keeps this object alive.

    ```
    use dlpack_rs::pyo3_glue::DLPackTensor;
    use dlpack_rs::safe::Export;
    use pyo3::prelude::*;

    #[pyfunction]
    fn make_image() -> PyResult<DLPackTensor> {
        Ok(DLPackTensor::from_export(Export::new(vec![0u8; 12]).shape(&[2, 2, 3]))?)
    }

    Python::initialize();
    Python::attach(|py| -> PyResult<()> {
        let t = Bound::new(py, make_image()?)?;
        assert_eq!(t.repr()?.to_string(), "Tensor(shape=(2, 2, 3), dtype=uint8, device=cpu:0, strides=(6, 3, 1))");
        Ok(())
    })
    .unwrap();
    ```
    """
    __dlpack_c_exchange_api__: Final[CapsuleType]
    """
    The DLPack 1.3 C exchange API table.
    """
    def __dlpack__(self, /, *, stream: Any | None = None, max_version: Any | None = None, dl_device: Any | None = None, copy: Any | None = None) -> CapsuleType:
        """
        Exports this tensor: the whole `__dlpack__` protocol.
        """
    def __dlpack_device__(self, /) -> tuple[int, int]:
        """
        `(device_type, device_id)` of the data.
        """
    def __repr__(self, /) -> str: ...
    @property
    def device(self, /) -> tuple[int, int]:
        """
        `(device_type, device_id)`.
        """
    @property
    def dtype(self, /) -> str:
        """
        The element type, numpy-style (`"float32"`).
        """
    @property
    def read_only(self, /) -> bool:
        """
        Whether consumers must not write to the data.
        """
    @property
    def shape(self, /) -> list[int]:
        """
        The extent of each dimension.
        """
    @property
    def strides(self, /) -> list[int]:
        """
        The strides, in elements.
        """

def grayscale(rgb: SupportsDLPack) -> DLPackArray:
    """
    Round trip: an `H x W x 3` `uint8` tensor in, its luma (`0.299 R + 0.587 G + 0.114 B`) out
    as a new Rust-owned `H x W` array, handed back as the caller's framework's own type.

    `Dims<3, ANY, ANY, 3>` checks the three channels at extraction: a 4-channel image gets
    `TypeError: expected shape (*, *, 3), got (480, 640, 4)`.
    """

def invert(tensor: SupportsDLPack) -> int:
    """
    Inverts the `uint8` values of any writable CPU tensor in place (`x -> 255 - x`), whatever
    its strides. Returns the number of values changed.

    The signature says it all: `uint8`, any shape, any layout, written in place. A caller's
    float tensor gets `TypeError`, a read-only one `BufferError` saying why.
    """
