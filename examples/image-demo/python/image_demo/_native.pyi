from typing import Any, Optional, Protocol, Tuple, TypeVar

class SupportsDLPack(Protocol):
    def __dlpack__(self, *, stream: Any = ..., max_version: Optional[Tuple[int, int]] = ...,
                   dl_device: Optional[Tuple[int, int]] = ..., copy: Optional[bool] = ...) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

class Image:
    """An height x width x 3 uint8 RGB image owned by Rust."""

    def __init__(self, height: int, width: int) -> None: ...
    @property
    def shape(self) -> Tuple[int, int, int]: ...
    @property
    def data_ptr(self) -> int: ...
    def __dlpack__(self, *, stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

class Tensor:
    """A Rust-owned DLPack tensor (dlpack_rs.Tensor)."""

    @property
    def shape(self) -> Tuple[int, ...]: ...
    def __dlpack__(self, *, stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

_Array = TypeVar("_Array", bound=SupportsDLPack)

def invert(tensor: SupportsDLPack) -> int:
    """Inverts the uint8 values of any writable CPU tensor in place; returns how many."""

def grayscale(tensor: _Array) -> _Array:
    """An H x W x 3 uint8 tensor in, a new Rust-owned H x W uint8 luma array out, as the
    caller's own kind of array (numpy in, numpy out; torch in, torch out)."""
