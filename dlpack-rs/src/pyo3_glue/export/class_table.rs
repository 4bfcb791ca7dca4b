//! The static C exchange table of each class (`__dlpack_c_exchange_api__`).

use core::ffi::c_void;
use core::ptr::NonNull;

use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::types::PyCapsule;
use pyo3::PyClass;

use crate::ffi::{DLPackExchangeAPI, DLPACK_EXCHANGE_API_CAPSULE_NAME};
use crate::pyo3_glue::export::class_export::ClassRoute;
use crate::pyo3_glue::export::exchange_export::{table, StaticApi};
use crate::pyo3_glue::export::tensor::{to_py_object, DLPackTensor, TENSOR_API};
use crate::IntoDLPack;

/// One table per user class, a promoted constant (static storage).
struct Tables<T>(core::marker::PhantomData<T>);

impl<T> Tables<T>
where
    T: PyClass,
    T::Frozen: ClassRoute<T>,
{
    const API: StaticApi = StaticApi(table::<T, true>(Some(to_py_object), None));
}

/// The static exchange table of class `T`: it exports instances zero-copy (versioned 1.3),
/// wraps tensors in a [`DLPackTensor`], allocates zeroed CPU tensors and reports the default
/// stream. Only [`DLPackTensor`] lends a bare `DLTensor` (other classes compute it per call).
#[doc(hidden)]
pub fn exchange_api<T>() -> &'static DLPackExchangeAPI
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync + 'static,
{
    class_exchange_api::<T>()
}

/// `exchange_api` for any class with a [`ClassRoute`] (frozen, or derived with shared data).
pub(crate) fn class_exchange_api<T>() -> &'static DLPackExchangeAPI
where
    T: PyClass + 'static,
    T::Frozen: ClassRoute<T>,
{
    if core::any::TypeId::of::<T>() == core::any::TypeId::of::<DLPackTensor>() {
        return &TENSOR_API.0;
    }
    let api: &'static StaticApi = &Tables::<T>::API;
    &api.0
}

/// The `__dlpack_c_exchange_api__` class attribute of `T`: a capsule of its table.
#[doc(hidden)]
pub fn class_exchange_api_capsule<T>(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>>
where
    T: IntoDLPack + PyClass + 'static,
    T::Frozen: ClassRoute<T>,
{
    let api = NonNull::from(class_exchange_api::<T>()).cast::<c_void>();
    // SAFETY: the table is static and immutable; consumers only read it. No destructor: the
    // capsule owns nothing.
    unsafe { PyCapsule::new_with_pointer(py, api, DLPACK_EXCHANGE_API_CAPSULE_NAME) }
}
