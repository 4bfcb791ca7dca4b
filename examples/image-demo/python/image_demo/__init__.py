"""A Rust image class shared with numpy and torch through DLPack, without copies."""

from ._native import Image, Tensor, grayscale, invert

TYPE_CHECKING = False
if TYPE_CHECKING:  # the protocols the generated stubs refer to (a stub-only module)
    from ._dlpack import DLPackArray as DLPackArray, SupportsDLPack as SupportsDLPack

__all__ = ["Image", "Tensor", "grayscale", "invert"]
