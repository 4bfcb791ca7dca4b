//! How a `#[pyclass]` exports itself (a frozen class is its own keepalive, a mutable one keeps a
//! clone of its shared data), and [`export_dlpack_value`] for a class with its own backing.

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::{False, True};
use pyo3::types::PyCapsule;
use pyo3::PyClass;

use std::sync::Arc;

use crate::ffi::DLDevice;
use crate::into_dlpack::DerivedData;
use crate::pyo3_glue::export::protocol::{export_capsule, ordered_stream, DLPackArgs};
use crate::pyo3_glue::runtime::keepalive::PyKeepalive;
use crate::safe::{Extent, Readers, SharedBuffer, StreamOrder, TensorInfo};
use crate::IntoDLPack;

/// `__dlpack__` of a frozen `#[pyclass]` (the derive's hidden route). The object is the
/// keepalive: frozen, it never hands out `&mut`, so its buffer stays in place. Each export holds
/// a shared borrow of the bytes until its deleter runs (none for a registered `SharedMut` field).
pub fn export_dlpack<'py, T>(
    slf: &Bound<'py, T>,
    stream: Option<Bound<'py, PyAny>>,
    max_version: Option<Bound<'py, PyAny>>,
    dl_device: Option<Bound<'py, PyAny>>,
    copy: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyCapsule>>
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    let args = DLPackArgs::parse(stream, max_version, dl_device, copy)?;
    export_object_capsule(slf, &args, true)
}

/// The whole `__dlpack__` protocol for a value that keeps its memory alive itself.
///
/// For a class the derive does not fit (a mutable `#[pyclass]` whose data sits in an enum of
/// backings, say): its own `__dlpack__` passes a shared handle of the data (an `Arc` clone).
/// `stream` orders device work before the consumer's stream; `dl_device` must be the data's
/// device (or the CPU, by copy); `copy=True` copies `kDLCPU` data, flagged `IS_COPIED` (device
/// data raises `BufferError`). `max_version` major >= 1 gives a versioned capsule, else a legacy
/// one: read-only data is then copied, or refused with `copy=False`.
///
/// The export holds a shared borrow of the bytes until its deleter runs, so imports of them get
/// shared views only. A value whose [`IntoDLPack::rust_access_registered`] is true (a
/// [`SharedMut`](crate::safe::SharedMut) clone) is exported writable with no borrow: consumers
/// see the class's edits made under `SharedMut::write`.
///
/// ```
/// use std::sync::Arc;
///
/// use dlpack_rs::pyo3_glue::{export_dlpack_value, IntoDLPack};
/// use dlpack_rs::safe::{cpu_device, dtype_u8, TensorInfo};
/// use pyo3::prelude::*;
/// use pyo3::types::{IntoPyDict, PyCapsule};
///
/// #[derive(Clone)]
/// enum Backing {
///     Host(Arc<[u8]>),
///     Zeros(Arc<[u8]>),
/// }
///
/// // SAFETY: both variants hold their bytes in an `Arc`'d allocation that no clone moves or
/// // frees while it lives, and no owner writes while shared: exported read-only.
/// unsafe impl IntoDLPack for Backing {
///     fn tensor_info(&self) -> TensorInfo {
///         let (Backing::Host(b) | Backing::Zeros(b)) = self;
///         TensorInfo::contiguous(b.as_ptr().cast_mut().cast(), cpu_device(), dtype_u8(), vec![b.len() as i64])
///     }
///     fn is_read_only(&self) -> bool {
///         true
///     }
/// }
///
/// #[pyclass]
/// struct Image {
///     backing: Backing,
/// }
///
/// #[pymethods]
/// impl Image {
///     #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
///     fn __dlpack__<'py>(
///         &self,
///         py: Python<'py>,
///         stream: Option<Bound<'py, PyAny>>,
///         max_version: Option<Bound<'py, PyAny>>,
///         dl_device: Option<Bound<'py, PyAny>>,
///         copy: Option<Bound<'py, PyAny>>,
///     ) -> PyResult<Bound<'py, PyCapsule>> {
///         export_dlpack_value(py, self.backing.clone(), stream, max_version, dl_device, copy)
///     }
///
///     fn clear(&mut self) {
///         self.backing = Backing::Zeros(vec![0; 4].into());
///     }
/// }
///
/// Python::initialize();
/// Python::attach(|py| -> PyResult<()> {
///     let image = Bound::new(py, Image { backing: Backing::Host(vec![1u8, 2, 3, 4].into()) })?;
///     let capsule = image.call_method("__dlpack__", (), Some(&[("max_version", (1, 3))].into_py_dict(py)?))?;
///     image.call_method0("clear")?; // the export keeps the old bytes alive
///     // SAFETY: made by our own `__dlpack__` just above.
///     let t = unsafe { dlpack_rs::pyo3_glue::PyTensor::from_capsule(capsule.cast()?) }?;
///     assert_eq!(*t.as_slice::<u8>()?, [1, 2, 3, 4]);
///     Ok(())
/// })
/// .unwrap();
/// ```
pub fn export_dlpack_value<'py, T: IntoDLPack + Send + 'static>(
    py: Python<'py>,
    value: T,
    stream: Option<Bound<'py, PyAny>>,
    max_version: Option<Bound<'py, PyAny>>,
    dl_device: Option<Bound<'py, PyAny>>,
    copy: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let args = DLPackArgs::parse(stream, max_version, dl_device, copy)?;
    crate::pyo3_glue::runtime::shared_registry::join(py)?;
    let (info, extent) = value.__tensor_info_with_extent()?;
    let validated = validated(info, extent)?;
    order_for_consumer(
        &args,
        validated.info().device,
        order_of(&value, validated.info()),
    )?;
    let read_only = value.is_read_only();
    // Rust may read the memory through another handle unless every such access is registered.
    let readers = if value.rust_access_registered() {
        Readers::ExportOnly
    } else {
        Readers::Rust
    };
    let share = value.share_read_only_legacy();
    // SAFETY: the `IntoDLPack` contract: `value` keeps the described memory valid and in place
    // (writable unless read-only); `readers` is `Rust` unless `rust_access_registered` vouches.
    unsafe { export_capsule(py, validated, read_only, readers, share, value, &args) }
}

/// `export_dlpack` with parsed arguments, for any class with a [`ClassRoute`]. `rust_reads`:
/// Rust may read the memory without a registered view (through `&self`), so the export holds a
/// shared borrow of it until its deleter runs.
pub(crate) fn export_object_capsule<'py, T>(
    slf: &Bound<'py, T>,
    args: &DLPackArgs,
    rust_reads: bool,
) -> PyResult<Bound<'py, PyCapsule>>
where
    T: PyClass,
    T::Frozen: ClassRoute<T>,
{
    let e = class_export(slf, rust_reads, args)?;
    // SAFETY: the `ClassRoute` contract: the keepalive keeps the described memory valid and in
    // place (writable unless read-only); Rust reads outside the export are in `readers`.
    unsafe {
        export_capsule(
            slf.py(),
            e.validated,
            e.read_only,
            e.readers,
            e.share,
            e.keepalive,
            args,
        )
    }
}

/// What [`class_export`] returns.
pub(crate) struct ClassExport<T: PyClass>
where
    T::Frozen: ClassRoute<T>,
{
    pub(crate) validated: crate::safe::Validated,
    pub(crate) read_only: bool,
    /// Who else reads the memory.
    pub(crate) readers: Readers,
    pub(crate) keepalive: ClassKeepalive<<T::Frozen as ClassRoute<T>>::Owner>,
    /// [`IntoDLPack::share_read_only_legacy`].
    pub(crate) share: bool,
}

/// One export of `slf` through its route, validated once ([`Readers::Rust`] when `rust_reads`).
/// Device data gets the consumer's stream ordered after its pending work.
pub(crate) fn class_export<T>(
    slf: &Bound<'_, T>,
    rust_reads: bool,
    args: &DLPackArgs,
) -> PyResult<ClassExport<T>>
where
    T: PyClass,
    T::Frozen: ClassRoute<T>,
{
    crate::pyo3_glue::runtime::shared_registry::join(slf.py())?;
    let r = <T::Frozen as ClassRoute<T>>::export(slf)?;
    let validated = validated(r.info, r.extent)?;
    // Registered Rust reads need no borrow of the export.
    let readers = if rust_reads && !r.registered {
        Readers::Rust
    } else {
        Readers::ExportOnly
    };
    // Last, once the rest of the export is known to be fine.
    order_for_consumer(args, validated.info().device, r.order)?;
    Ok(ClassExport {
        validated,
        read_only: r.read_only,
        readers,
        keepalive: r.owner,
        share: r.share,
    })
}

/// `info` validated, reusing the extent the implementation's own check returned.
#[inline(always)]
fn validated(
    info: TensorInfo,
    extent: Option<Extent>,
) -> Result<crate::safe::Validated, crate::safe::Error> {
    match extent {
        // SAFETY: the `IntoDLPack` contract of `__tensor_info_with_extent`: `Some(e)` only where
        // `info.extent()` is `Ok(e)` for the very `info` returned.
        Some(extent) => Ok(unsafe { crate::safe::Validated::new_unchecked(info, extent) }),
        None => crate::safe::Validated::new(info),
    }
}

/// For device data: checks `stream` and orders the consumer's stream (`None`: the default) after
/// pending work, unless it is -1.
#[inline(always)]
fn order_for_consumer(
    args: &DLPackArgs,
    device: DLDevice,
    order: Option<Arc<dyn StreamOrder>>,
) -> PyResult<()> {
    if let Some(order) = order {
        args.check_stream(device)?;
        if let Some(stream) = ordered_stream(device, args.stream) {
            order.order_before(device, stream)?;
        }
    }
    Ok(())
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for pyo3::pyclass::boolean_struct::True {}
    impl Sealed for pyo3::pyclass::boolean_struct::False {}
}

/// How an export of a `#[pyclass]` keeps its memory alive, chosen by `T::Frozen`. Named by the
/// derive's generated code; not a public API.
///
/// - **Frozen** (`True`): the Python object itself, which never hands out `&mut`, so the
///   memory [`IntoDLPack::tensor_info`] describes stays in place.
/// - **Mutable** (`False`, derived classes only): a clone of the data field, a
///   [`SharedBuffer`], so a `&mut self` method may replace the class's value without touching
///   what a consumer reads. Read-only unless the data is registry-guarded (`SharedMut`).
///
/// # Safety
///
/// `export`'s keepalive keeps the memory its `TensorInfo` describes valid, initialised and in
/// place while it lives, and writable unless the export is read-only; `registered` is true only
/// if every Rust access outside the export holds a registry borrow throughout; a `Some` extent
/// is what `info.extent()` returns for that `info`. (Sealed: the keepalive type is unnameable.)
#[doc(hidden)]
pub unsafe trait ClassRoute<T: PyClass>: sealed::Sealed {
    /// The object, or the export's own clone of its data.
    type Owner: Send + 'static;
    /// One export's metadata, keepalive and flags (see the trait's safety contract).
    fn export(slf: &Bound<'_, T>) -> PyResult<RouteExport<Self::Owner>>;
}

/// What [`ClassRoute::export`] returns.
#[doc(hidden)]
pub struct RouteExport<O> {
    /// The metadata.
    pub info: TensorInfo,
    /// Its extent, if the implementation validated it.
    pub extent: Option<Extent>,
    /// Whether consumers must not write the memory.
    pub read_only: bool,
    /// What keeps the memory alive.
    pub owner: ClassKeepalive<O>,
    /// For device data: orders a consumer's stream after pending work.
    pub order: Option<Arc<dyn StreamOrder>>,
    /// [`IntoDLPack::rust_access_registered`].
    pub registered: bool,
    /// [`IntoDLPack::share_read_only_legacy`].
    pub share: bool,
}

/// The stream order of `this`, asked only for data that is not plain CPU memory.
fn order_of<T: IntoDLPack + ?Sized>(this: &T, info: &TensorInfo) -> Option<Arc<dyn StreamOrder>> {
    if info.device.device_type.is_host_viewable() {
        None
    } else {
        this.stream_order()
    }
}

/// What keeps an export's memory alive; unnameable outside this crate, which seals [`ClassRoute`].
#[doc(hidden)]
pub struct ClassKeepalive<O> {
    _owner: O,
}

// SAFETY: the keepalive holds the frozen object, whose `unsafe impl IntoDLPack` vouches for the
// memory and extent `__tensor_info_with_extent` returns; a frozen object is never mutably
// borrowed, so that memory stays valid and in place until the keepalive drops.
unsafe impl<T> ClassRoute<T> for True
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    type Owner = PyKeepalive;

    fn export(slf: &Bound<'_, T>) -> PyResult<RouteExport<PyKeepalive>> {
        let this = slf.get();
        let (info, extent) = this.__tensor_info_with_extent()?;
        let order = order_of(this, &info);
        let owner = PyKeepalive::new(slf.py(), slf.clone().into_any().unbind());
        Ok(RouteExport {
            info,
            extent,
            read_only: this.is_read_only(),
            owner: ClassKeepalive { _owner: owner },
            order,
            registered: this.rust_access_registered(),
            share: this.share_read_only_legacy(),
        })
    }
}

// SAFETY: the keepalive is a clone of the data field, which holds every byte `tensor_info`
// describes (`DerivedData`) and, a `SharedBuffer`, keeps that memory alive and in place.
// Copy-on-write data is never written while shared: exported read-only. Registry-guarded data
// (`SharedMut`) is reached by Rust only under registry borrows: writable where `is_read_only`
// allows (the derive's `consumers_may_write`), with every Rust access registered.
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
        let (info, extent) = this.__tensor_info_with_extent()?;
        let order = order_of(&*this, &info);
        // Copy-on-write memory must not be written by consumers either; guarded memory may.
        let guarded = <T::Data as crate::safe::Buffer>::REGISTRY_GUARDED;
        let read_only = !guarded || this.is_read_only();
        let share = this.share_read_only_legacy();
        // The export's own reference: the class may replace its value once `this` is released.
        let owner = this.data_field().clone();
        drop(this);
        Ok(RouteExport {
            info,
            extent,
            read_only,
            owner: ClassKeepalive { _owner: owner },
            order,
            registered: guarded,
            share,
        })
    }
}

/// `__dlpack_device__()` of `this`, or the `BufferError` its export would raise (a derived
/// layout outside its data field).
pub fn export_dlpack_device<T: IntoDLPack + ?Sized>(this: &T) -> PyResult<(i32, i32)> {
    let (info, _) = this.__tensor_info_with_extent()?;
    Ok((info.device.device_type.0, info.device.device_id))
}
