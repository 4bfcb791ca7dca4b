"""A Rust image class shared with numpy and torch through DLPack, without copies."""

from ._native import Image, Tensor, grayscale, invert

__all__ = ["Image", "Tensor", "grayscale", "invert"]
