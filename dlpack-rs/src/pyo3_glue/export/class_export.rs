//! The one export route of our classes and values: [`ClassRoute`] and [`export_dlpack_value`].

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::{False, True};
use pyo3::types::PyCapsule;
use pyo3::PyClass;

use crate::into_dlpack::DerivedData;
use crate::pyo3_glue::export::protocol::{export_capsule, DLPackArgs, RouteExport};
use crate::pyo3_glue::runtime::keepalive::PyKeepalive;
use crate::safe::SharedBuffer;
use crate::IntoDLPack;

/// The whole `__dlpack__` protocol for a value that keeps its memory alive itself, for a class
/// the derive does not fit ([export guide](https://github.com/kornia/dlpack-rs/blob/main/docs/export.md#a-class-that-writes-its-own-__dlpack__)).
pub fn export_dlpack_value<'py, T: IntoDLPack + Send + 'static>(
    py: Python<'py>,
    value: T,
    stream: Option<Bound<'py, PyAny>>,
    max_version: Option<Bound<'py, PyAny>>,
    dl_device: Option<Bound<'py, PyAny>>,
    copy: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let args = DLPackArgs::parse(stream, max_version, dl_device, copy)?;
    let described = RouteExport::of(&value)?;
    // SAFETY: the `IntoDLPack` contract: `value` keeps the memory it describes valid and in place
    // (writable unless read-only), and answers `rust_access_registered` truly.
    unsafe { export_capsule(py, described.kept_by(value), &args) }
}

/// `__dlpack__` of `slf` with parsed arguments, through its class's [`ClassRoute`].
pub(crate) fn class_capsule<'py, T: RoutedClass>(
    slf: &Bound<'py, T>,
    args: &DLPackArgs,
) -> PyResult<Bound<'py, PyCapsule>> {
    let r = <T::Frozen as ClassRoute<T>>::export(slf)?;
    // SAFETY: made by the class's `ClassRoute`, whose contract is `export_capsule`'s.
    unsafe { export_capsule(slf.py(), r, args) }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for pyo3::pyclass::boolean_struct::True {}
    impl Sealed for pyo3::pyclass::boolean_struct::False {}
}

/// How a `#[pyclass]` export keeps its memory alive (the object, or a [`SharedBuffer`] clone).
/// # Safety
/// `export`'s keepalive keeps the memory it describes valid, initialised and in place while it
/// lives, and writable unless the export is read-only; `registered` is true only if every Rust
/// access outside the export holds a registry borrow throughout. (Sealed.)
#[doc(hidden)]
pub unsafe trait ClassRoute<T: PyClass>: sealed::Sealed {
    /// The object, or the export's own clone of its data.
    type Owner: Send + 'static;
    /// One export's metadata, keepalive and flags (see the trait's safety contract).
    fn export(slf: &Bound<'_, T>) -> PyResult<RouteExport<Self::Owner>>;
}

/// A `#[pyclass]` with a [`ClassRoute`]: the bound of every generic export of a class.
pub trait RoutedClass: PyClass<Frozen: ClassRoute<Self>> {}

impl<T: PyClass<Frozen: ClassRoute<T>>> RoutedClass for T {}

// SAFETY: the keepalive holds the frozen object (never mutably borrowed), whose `IntoDLPack` impl
// vouches for what `__tensor_info_with_extent` returns until the keepalive drops it.
unsafe impl<T> ClassRoute<T> for True
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    type Owner = PyKeepalive;

    #[inline(always)]
    fn export(slf: &Bound<'_, T>) -> PyResult<RouteExport<PyKeepalive>> {
        let described = RouteExport::of(slf.get())?;
        let owner = PyKeepalive::new(slf.py(), slf.clone().into_any().unbind());
        // SAFETY: the object keeps its memory (see the impl's comment).
        Ok(unsafe { described.kept_by(owner) })
    }
}

// SAFETY: the keepalive clones the data field, a `SharedBuffer` keeping every byte `tensor_info`
// describes (`DerivedData`) alive and in place. Copy-on-write data exports read-only; guarded
// data (`SharedMut`) is writable where `consumers_may_write` allows, every Rust access registered.
unsafe impl<T> ClassRoute<T> for False
where
    T: DerivedData + PyClass<Frozen = False>,
    T::Data: SharedBuffer,
{
    type Owner = T::Data;

    fn export(slf: &Bound<'_, T>) -> PyResult<RouteExport<T::Data>> {
        let this = slf.try_borrow().map_err(|_| {
            PyBufferError::new_err(
                "cannot export: the object is being mutated (a `&mut self` method is running)",
            )
        })?;
        let mut described = RouteExport::of(&*this)?;
        // Copy-on-write memory must not be written by consumers either; guarded memory may.
        let guarded = <T::Data as crate::safe::Buffer>::REGISTRY_GUARDED;
        described.read_only |= !guarded;
        described.registered = guarded;
        // The export's own reference: the class may replace its value once `this` is released.
        let owner = this.data_field().clone();
        drop(this);
        // SAFETY: the clone keeps the memory (see the impl's comment).
        Ok(unsafe { described.kept_by(owner) })
    }
}

/// `__dlpack_device__()` of `this`, or the `BufferError` its export would raise.
pub fn export_dlpack_device<T: IntoDLPack + ?Sized>(this: &T) -> PyResult<(i32, i32)> {
    let (info, _) = this.__tensor_info_with_extent()?;
    Ok((info.device.device_type.0, info.device.device_id))
}
