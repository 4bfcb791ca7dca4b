//! How a class of ours exports itself: what the `__dlpack__` and `__dlpack_device__` of a
//! `#[pyclass]` delegate to (a frozen class is its own keepalive; a mutable one keeps a clone of
//! its shared data), and [`export_dlpack_value`] for a class with a backing of its own.

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

/// `__dlpack__` of a frozen `#[pyclass]` that implements [`IntoDLPack`]: the route of the
/// derive's methods (reached through its hidden module). The object itself is the keepalive,
/// and each export holds a shared borrow of the bytes until its deleter runs (none for a
/// `SharedMut` field, whose write guards are registered); frozen, the class never hands out
/// `&mut`, so its buffer cannot move while exported.
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

/// The whole `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)` protocol
/// for a value that keeps its memory alive itself: the door for a class the derive does not fit
/// (a mutable `#[pyclass]` whose data sits in an enum of backings, say) that writes its own
/// `__dlpack__` and hands over a shared handle of its data (an `Arc` clone) as the keepalive.
///
/// Arguments: `stream` orders device work before the consumer's stream; `dl_device` must be
/// the data's device (or the CPU for host memory, by copy); `copy=True` makes a copy flagged
/// `IS_COPIED` of `kDLCPU` data (device data raises `BufferError`); `max_version` major >= 1
/// gives a versioned capsule, else a legacy one, which cannot say "read-only": read-only data
/// is then copied, or refused with `copy=False`. The export holds a shared borrow of the bytes until its
/// deleter runs, since the class's own Rust code may read them through another handle: imports
/// of it get shared views only, and a mutable view of them raises `BufferError` meanwhile.
///
/// **Shared-mutable data.** A value whose [`IntoDLPack::rust_access_registered`] is true (a
/// [`SharedMut`](crate::safe::SharedMut) clone, or a backing that forwards it) is exported
/// writable and holds no borrow: consumers' views see the class's in-place edits (made under
/// `SharedMut::write`, refused only while another Rust view of the bytes lives, an import's
/// `TensorViewMut` or `as_mut_slice` included).
///
/// ```
/// use std::sync::Arc;
///
/// use dlpack_rs::pyo3_glue::{export_dlpack_value, IntoDLPack};
/// use dlpack_rs::safe::{cpu_device, dtype_u8, TensorInfo};
/// use pyo3::prelude::*;
/// use pyo3::types::PyCapsule;
///
/// /// The data of an image, wherever it lives (a backing enum, as kornia's `Image` has).
/// #[derive(Clone)]
/// enum Backing {
///     Host(Arc<[u8]>),
///     Zeros(Arc<Vec<u8>>),
/// }
///
/// // SAFETY: both variants hold their bytes in an `Arc`'d heap allocation that no clone moves
/// // or frees while it lives, and no owner writes while shared: exported read-only.
/// unsafe impl IntoDLPack for Backing {
///     fn tensor_info(&self) -> TensorInfo {
///         let bytes: &[u8] = match self {
///             Backing::Host(b) => b,
///             Backing::Zeros(v) => v,
///         };
///         TensorInfo::contiguous(bytes.as_ptr().cast_mut().cast(), cpu_device(), dtype_u8(), vec![bytes.len() as i64])
///     }
///     fn is_read_only(&self) -> bool {
///         true
///     }
/// }
///
/// /// A mutable class: `&mut self` methods may replace the backing while exports hold theirs.
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
///     fn __dlpack_device__(&self) -> (i32, i32) {
///         (1, 0)
///     }
///
///     fn clear(&mut self) {
///         self.backing = Backing::Zeros(Arc::new(vec![0; 4]));
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
/// # use pyo3::types::IntoPyDict;
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
    // Rust code may read the memory through another handle of the class without a registered
    // view (`Readers::Rust`: the export holds a shared borrow), unless the value says every such
    // access holds a registry borrow itself (`safe::SharedMut`).
    let readers = if value.rust_access_registered() {
        Readers::ExportOnly
    } else {
        Readers::Rust
    };
    let share = value.share_read_only_legacy();
    // SAFETY: the `IntoDLPack` contract: `value` (the keepalive) keeps the memory the metadata
    // describes valid and in place (writable unless read-only); `readers` is `Rust` unless
    // `rust_access_registered` vouches that every other Rust access is registered.
    unsafe { export_capsule(py, validated, read_only, readers, share, value, &args) }
}

/// `export_dlpack` with arguments already parsed, for any class with a [`ClassRoute`].
/// `rust_reads` says whether Rust code may read the exported memory without a registered view
/// (a `#[pyclass]` reading its own field through `&self`): the export then holds a shared
/// borrow of it until the deleter runs, so no import of the memory can take a mutable view
/// meanwhile.
pub(crate) fn export_object_capsule<'py, T>(
    slf: &Bound<'py, T>,
    args: &DLPackArgs,
    rust_reads: bool,
) -> PyResult<Bound<'py, PyCapsule>>
where
    T: PyClass,
    T::Frozen: ClassRoute<T>,
{
    let ClassExport {
        validated,
        read_only,
        readers,
        keepalive,
        share,
    } = class_export(slf, rust_reads, args)?;
    // SAFETY: the route's contract: the keepalive keeps the memory the metadata describes valid
    // and in place (writable unless read-only) until the deleter drops it; Rust reads of the
    // memory outside the export are declared by `readers`.
    unsafe {
        export_capsule(
            slf.py(),
            validated,
            read_only,
            readers,
            share,
            keepalive,
            args,
        )
    }
}

/// What [`class_export`] returns.
pub(crate) struct ClassExport<T: PyClass>
where
    T::Frozen: ClassRoute<T>,
{
    /// The validated metadata.
    pub(crate) validated: crate::safe::Validated,
    /// Whether the export is read-only.
    pub(crate) read_only: bool,
    /// Who else reads the memory (the export's shared borrow is registered where every export
    /// passes, from this answer).
    pub(crate) readers: Readers,
    /// What keeps the memory alive.
    pub(crate) keepalive: ClassKeepalive<<T::Frozen as ClassRoute<T>>::Owner>,
    /// Whether a legacy request of read-only data shares it
    /// ([`IntoDLPack::share_read_only_legacy`]).
    pub(crate) share: bool,
}

/// One export of `slf` through its route, validated once: the metadata, whether it
/// is read-only, who else reads it ([`Readers::Rust`] when `rust_reads`), and the keepalive.
///
/// For data on a device with streams, `args.stream` is checked against the device and the
/// consumer's stream (`None`: the default stream) is ordered after the producer's pending work
/// ([`IntoDLPack::stream_order`]), unless it is -1.
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
    let RouteExport {
        info,
        extent,
        read_only,
        owner,
        order,
        registered,
        share,
    } = <T::Frozen as ClassRoute<T>>::export(slf)?;
    // Validated once: by the implementation (the derive's bounds check), or here.
    let validated = validated(info, extent)?;
    // Rust reads outside the export that are registered themselves need no borrow of it.
    let readers = if rust_reads && !registered {
        Readers::Rust
    } else {
        Readers::ExportOnly
    };
    // Last, once everything else about the export is known to be fine.
    order_for_consumer(args, validated.info().device, order)?;
    Ok(ClassExport {
        validated,
        read_only,
        readers,
        keepalive: owner,
        share,
    })
}

/// `info` validated: with the extent the implementation's own validation returned (the derive's
/// bounds check), or now.
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

/// For device data with pending work: checks `stream` against the device and orders the
/// consumer's stream (`None`: the default stream) after that work, unless it is -1.
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

/// How an export of a `#[pyclass]` instance keeps its memory alive, chosen by whether the class
/// is frozen (`T::Frozen`, pyo3's `True` or `False`). Not a public API: named by the code
/// `#[derive(IntoDLPack)]` generates.
///
/// - **Frozen** (`True`): the keepalive is the Python object itself. Python never hands out
///   `&mut` to a frozen object, so the memory its [`IntoDLPack::tensor_info`] describes stays
///   in place until the last consumer lets go.
/// - **Mutable** (`False`, derived classes only): the keepalive is a clone of the class's data
///   field, which must be a [`SharedBuffer`] (`Arc<[T]>`, `ArcArray`, ...): a `&mut self`
///   method may then replace the class's value at any time without touching the memory a
///   consumer reads. Such exports are read-only.
///
/// # Safety
///
/// `export` returns a keepalive that keeps the memory the returned `TensorInfo` describes valid,
/// in place and initialised for as long as it lives (writable by consumers unless the returned
/// flag says read-only). (Sealed in practice: the keepalive type cannot be
/// named outside this crate.)
#[doc(hidden)]
pub unsafe trait ClassRoute<T: PyClass>: sealed::Sealed {
    /// What keeps the memory alive: the object, or the export's own clone of its data.
    type Owner: Send + 'static;
    /// The metadata (with its extent, if validated already), whether the export is read-only,
    /// the keepalive, the stream order, and whether Rust accesses to the memory outside the
    /// export are all registered. Contract: the keepalive keeps the described memory valid and
    /// in place while it lives, and writable unless read-only; the last flag is true only if
    /// every such access holds a registry borrow for its whole length; a `Some` extent is
    /// what `info.extent()` would return for the returned `info` (the `IntoDLPack` contract of
    /// `__tensor_info_with_extent`).
    fn export(slf: &Bound<'_, T>) -> PyResult<RouteExport<Self::Owner>>;
}

/// What [`ClassRoute::export`] returns.
#[doc(hidden)]
pub struct RouteExport<O> {
    /// The metadata.
    pub info: TensorInfo,
    /// Its extent, when the implementation validated it (`IntoDLPack::__tensor_info_with_extent`).
    pub extent: Option<Extent>,
    /// Whether consumers must not write the memory.
    pub read_only: bool,
    /// What keeps the memory alive.
    pub owner: ClassKeepalive<O>,
    /// For device data only: what orders a consumer's stream after the producer's pending work.
    pub order: Option<Arc<dyn StreamOrder>>,
    /// Whether every Rust access to the memory outside the export holds a registry borrow
    /// ([`IntoDLPack::rust_access_registered`]).
    pub registered: bool,
    /// Whether a legacy request of read-only data shares the memory
    /// ([`IntoDLPack::share_read_only_legacy`]).
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

/// What keeps the memory of an export of a pyclass instance alive (the object, or a clone of
/// its data); unnameable outside this crate, which seals [`ClassRoute`] in practice.
#[doc(hidden)]
pub struct ClassKeepalive<O> {
    _owner: O,
}

// SAFETY: the keepalive holds the frozen object, whose `unsafe impl IntoDLPack` vouches for the
// memory `tensor_info` describes (and for the extent `__tensor_info_with_extent` returns with
// it); a frozen object is never mutably borrowed, so that memory stays valid and in place until
// the keepalive is dropped.
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

// SAFETY: the keepalive holds a clone of the data field, which `DerivedData` says contains every
// byte `tensor_info` describes, and which (`SharedBuffer`) describes the same memory as the
// field and keeps it alive and in place. Copy-on-write data is never written while shared: the
// export is read-only. Registry-guarded data (`Buffer::REGISTRY_GUARDED`, `SharedMut`) is
// reached by Rust only under registry borrows: the export is writable where the class's
// `is_read_only` allows (the derive's `consumers_may_write`: a pointer with write permission,
// an element type with no invalid bit patterns), and says that every Rust access is registered.
// The pointer `tensor_info` read is exported as is (the field is read once).
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
        // Copy-on-write memory is never written by its owners (the `SharedBuffer` contract), so
        // no consumer may write it either: read-only. Guarded memory is shared-mutable.
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

/// The `__dlpack_device__()` answer for `this`: `(device_type, device_id)`, or the
/// `BufferError` its export would raise for a description it refuses (a derived layout outside
/// its data field).
pub fn export_dlpack_device<T: IntoDLPack + ?Sized>(this: &T) -> PyResult<(i32, i32)> {
    let (info, _) = this.__tensor_info_with_extent()?;
    Ok((info.device.device_type.0, info.device.device_id))
}
