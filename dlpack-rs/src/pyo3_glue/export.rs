//! What a `#[pyclass(frozen)]`'s `__dlpack__` and `__dlpack_device__` delegate to.

use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::types::PyCapsule;
use pyo3::PyClass;

use super::keepalive::PyKeepalive;
use super::protocol::{export_capsule, DLPackArgs};
use crate::safe::borrow::BorrowToken;
use crate::safe::{borrow_described, TensorInfo};
use crate::IntoDLPack;

/// The whole `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`
/// protocol for a frozen `#[pyclass]` that implements [`IntoDLPack`].
///
/// Each call exports a new managed tensor whose keepalive is the Python object itself, so the
/// object (and the memory [`IntoDLPack::tensor_info`] describes) lives until every consumer
/// has called its deleter. Arguments: `stream` is checked against the device; `dl_device`
/// must be the data's device (or the CPU for host memory, by copy); `copy=True` makes a real
/// copy flagged `IS_COPIED`; `max_version` major >= 1 gives a versioned capsule, else a legacy
/// one, which read-only data cannot have (`BufferError`).
///
/// **Borrows.** Rust code of the class may read the exported memory through `&self` at any
/// time, so each export holds a shared borrow of it in the [borrow
/// registry](crate::safe::borrow) until its deleter runs: an import of the export (directly,
/// or after torch re-exported it) gets shared views only, and `as_mut_slice` on it raises
/// `BufferError`. Python consumers may still write memory exported writable (outside the
/// model, as with any buffer handed to foreign code); `#[dlpack(read_only)]` /
/// `is_read_only` exports it `READ_ONLY`.
///
/// **Mutation safety.** The class must be `frozen`: Python then never hands out `&mut` to
/// it, so no Rust code can mutate (or reallocate) the exported buffer while a consumer
/// holds a view of it. Writes can only come from consumers, and only to data that is not
/// read-only.
///
/// ```
/// use dlpack_rs::pyo3_glue::{export_dlpack, export_dlpack_device, IntoDLPack};
/// use dlpack_rs::safe::{cpu_device, dtype_f32, TensorInfo};
/// use pyo3::prelude::*;
/// use pyo3::types::PyCapsule;
///
/// #[pyclass(frozen)]
/// struct Image {
///     pixels: Vec<f32>,
/// }
///
/// // SAFETY: the Vec holds 4 f32s in a heap buffer that moves with nothing; `as_ptr` takes
/// // the pointer without a reference to the elements.
/// unsafe impl IntoDLPack for Image {
///     fn tensor_info(&self) -> TensorInfo {
///         TensorInfo::contiguous(self.pixels.as_ptr() as *mut _, cpu_device(), dtype_f32(), vec![2, 2])
///     }
/// }
///
/// #[pymethods]
/// impl Image {
///     #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
///     fn __dlpack__<'py>(
///         slf: &Bound<'py, Self>,
///         stream: Option<Bound<'py, PyAny>>,
///         max_version: Option<Bound<'py, PyAny>>,
///         dl_device: Option<Bound<'py, PyAny>>,
///         copy: Option<Bound<'py, PyAny>>,
///     ) -> PyResult<Bound<'py, PyCapsule>> {
///         export_dlpack(slf, stream, max_version, dl_device, copy)
///     }
///
///     fn __dlpack_device__(&self) -> (i32, i32) {
///         export_dlpack_device(self)
///     }
/// }
///
/// Python::initialize();
/// Python::attach(|py| -> PyResult<()> {
///     let image = Bound::new(py, Image { pixels: vec![0.0; 4] })?;
///     let capsule = image.call_method0("__dlpack__")?;
///     assert_eq!(capsule.cast::<PyCapsule>()?.name()?.map(|n| unsafe { n.as_cstr() }.to_owned()), Some(c"dltensor".to_owned()));
///     Ok(())
/// })
/// .unwrap();
/// ```
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

/// [`export_dlpack`] with arguments already parsed. `rust_reads` says whether Rust code may read
/// the exported memory without a registered view (a `#[pyclass]` reading its own field through
/// `&self`): the export then holds a shared borrow of it until the deleter runs, so no import
/// of the memory can take a mutable view meanwhile.
pub(crate) fn export_object_capsule<'py, T>(
    slf: &Bound<'py, T>,
    args: &DLPackArgs,
    rust_reads: bool,
) -> PyResult<Bound<'py, PyCapsule>>
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    let (info, read_only, keepalive) = object_export(slf, rust_reads)?;
    // SAFETY: the keepalive holds the frozen Python object whose value vouches for the memory
    // `info` describes (the `unsafe impl IntoDLPack` contract); a frozen class is never mutably
    // borrowed, so the memory stays valid and in place until the deleter drops the keepalive.
    unsafe { export_capsule(slf.py(), info, read_only, keepalive, args) }
}

/// The keepalive of an export of a frozen pyclass instance: the registered borrow of its
/// memory (released first), then the object itself.
pub(crate) type ObjectKeepalive = (Option<BorrowToken>, PyKeepalive);

/// What an export of a frozen pyclass instance needs: its metadata, whether it is read-only,
/// and the keepalive (shared by `__dlpack__` and the C exchange API). See
/// [`export_object_capsule`] for `rust_reads`; a borrow that conflicts with a live mutable view
/// of the memory raises `BufferError`.
pub(crate) fn object_export<T>(
    slf: &Bound<'_, T>,
    rust_reads: bool,
) -> PyResult<(TensorInfo, bool, ObjectKeepalive)>
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    let py = slf.py();
    super::borrow::join(py)?;
    let this = slf.get();
    let info = this.tensor_info();
    let borrow = if rust_reads {
        Some(borrow_described(&info, false)?)
    } else {
        None
    };
    let keepalive = PyKeepalive::new(py, slf.clone().into_any().unbind());
    Ok((info, this.is_read_only(), (borrow, keepalive)))
}

/// The `__dlpack_device__()` answer for `this`: `(device_type, device_id)`.
pub fn export_dlpack_device<T: IntoDLPack + ?Sized>(this: &T) -> (i32, i32) {
    let device = this.tensor_info().device;
    (device.device_type.0, device.device_id)
}
