from ._native import Image as Image, Tensor as Tensor, grayscale as grayscale, invert as invert

__all__ = ["Image", "Tensor", "grayscale", "invert"]
