"""DLPack protocols referred to by stubs generated with dlpack-rs (feature `inspect`)."""

from typing import Any, Optional, Protocol, Tuple

class SupportsDLPack(Protocol):
    """Any object with `__dlpack__`: a numpy array, torch tensor, jax array, ..."""

    def __dlpack__(self, /) -> Any: ...

class DLPackArray(Protocol):
    """An array with the array API standard's DLPack methods: what a result in the caller's
    framework is (at run time a numpy array, torch tensor, jax array or dlpack_rs.Tensor; jax's
    own stub declares less, so a jax.Array does not type-check as one)."""

    def __dlpack__(
        self,
        /,
        *,
        stream: Optional[Any] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Any] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self, /) -> Tuple[int, int]: ...

class DLPackMethod(Protocol):
    """`__dlpack__` as the array API standard writes it."""

    def __call__(
        self,
        /,
        *,
        stream: Optional[Any] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
