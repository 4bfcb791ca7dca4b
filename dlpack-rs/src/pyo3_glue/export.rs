//! What a `#[pyclass(frozen)]`'s `__dlpack__` and `__dlpack_device__` delegate to.

use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::types::PyCapsule;
use pyo3::PyClass;

use super::capsule::PyKeepalive;
use super::protocol::{export_capsule, DLPackArgs};
use crate::safe::TensorInfo;
use crate::IntoDLPack;

/// The whole `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`
/// protocol for a frozen `#[pyclass]` that implements [`IntoDLPack`].
///
/// Each call exports a new managed tensor whose keepalive is the Python object itself, so the
/// object (and the memory [`IntoDLPack::tensor_info`] describes) lives until every consumer
/// has called its deleter; see [`export_capsule`] for how each argument is handled.
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
/// impl IntoDLPack for Image {
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
    export_with_args(slf, &args)
}

/// [`export_dlpack`] with arguments already parsed.
pub fn export_with_args<'py, T>(
    slf: &Bound<'py, T>,
    args: &DLPackArgs,
) -> PyResult<Bound<'py, PyCapsule>>
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    let (info, read_only, keepalive) = object_export(slf);
    // SAFETY: the keepalive holds the frozen Python object that owns the memory `info`
    // describes (the IntoDLPack contract); frozen classes are never mutably borrowed, so the
    // memory stays valid and in place until the keepalive is dropped by the deleter.
    unsafe { export_capsule(slf.py(), info, read_only, keepalive, args) }
}

/// What an export of a frozen pyclass instance needs: its metadata, whether it is read-only,
/// and the object itself as the keepalive (shared by `__dlpack__` and the C exchange API).
pub(crate) fn object_export<T>(slf: &Bound<'_, T>) -> (TensorInfo, bool, PyKeepalive)
where
    T: IntoDLPack + PyClass<Frozen = True> + Sync,
{
    let this = slf.get();
    let keepalive = PyKeepalive::new(slf.py(), slf.clone().into_any().unbind());
    (this.tensor_info(), this.is_read_only(), keepalive)
}

/// The `__dlpack_device__()` answer for `this`: `(device_type, device_id)`.
pub fn export_dlpack_device<T: IntoDLPack + ?Sized>(this: &T) -> (i32, i32) {
    let device = this.tensor_info().device;
    (device.device_type.0, device.device_id)
}
