//! Which C exchange table each class of ours publishes (`__dlpack_c_exchange_api__`): one
//! static table per class, and the capsule of the class attribute.

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

/// Tables of user classes: one per class, a promoted constant (static storage).
struct Tables<T>(core::marker::PhantomData<T>);

impl<T> Tables<T>
where
    T: PyClass,
    T::Frozen: ClassRoute<T>,
{
    const API: StaticApi = StaticApi(table::<T, true>(Some(to_py_object), None));
}

/// The static exchange table of class `T`: `managed_tensor_from_py_object_no_sync` exports an
/// instance zero-copy (versioned 1.3, `READ_ONLY` when [`IntoDLPack::is_read_only`]), keeping
/// it alive until the consumer's deleter call; `managed_tensor_to_py_object_no_sync` wraps a
/// tensor in a [`DLPackTensor`]; the allocator makes zeroed CPU tensors; the work stream is the
/// device's default stream (`CU_STREAM_LEGACY` for CUDA), before which device exports are
/// ordered. `dltensor_from_py_object_no_sync` is provided for [`DLPackTensor`] only (NULL for
/// other classes, whose metadata is computed per call and could not outlive it).
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

/// The `__dlpack_c_exchange_api__` class attribute of class `T`: a `"dlpack_exchange_api"`
/// capsule pointing at its table. What the derive's methods add.
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
