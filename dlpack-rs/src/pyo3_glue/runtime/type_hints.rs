//! Type hints for generated stubs (feature `inspect`).

use pyo3::inspect::PyStaticExpr;

/// The module that defines [`TYPING_STUB`]'s protocols, if the build names one.
const MODULE: Option<&str> = option_env!("DLPACK_RS_TYPING_MODULE");

const MODULE_NAME: PyStaticExpr = PyStaticExpr::Name {
    id: match MODULE {
        Some(module) => module,
        None => "_typeshed",
    },
};

/// What pyo3 writes for a type it cannot name.
const INCOMPLETE: PyStaticExpr = pyo3::type_hint_identifier!("_typeshed", "Incomplete");

/// The protocol `attr` of [`MODULE`], or [`INCOMPLETE`] without one.
const fn protocol(attr: &'static str) -> PyStaticExpr {
    match MODULE {
        Some(_) => PyStaticExpr::Attribute {
            value: &MODULE_NAME,
            attr,
        },
        None => INCOMPLETE,
    }
}

/// Any object with `__dlpack__`: what every typed argument and `PyTensor` accepts.
pub(crate) const SUPPORTS_DLPACK: PyStaticExpr = protocol("SupportsDLPack");

/// An array with the array API's `__dlpack__` and `__dlpack_device__`: a `Returned<Framework>`.
pub(crate) const DLPACK_ARRAY: PyStaticExpr = protocol("DLPackArray");

/// The `__dlpack__` method of a derived class, with the array API standard's signature.
pub(crate) const DLPACK_METHOD: PyStaticExpr = protocol("DLPackMethod");

/// The text of the stub module `DLPACK_RS_TYPING_MODULE` names, shipped beside the stubs.
pub const TYPING_STUB: &str = r#""""DLPack protocols referred to by stubs generated with dlpack-rs (feature `inspect`)."""

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
"#;
