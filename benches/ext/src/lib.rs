//! `dlpack_bench`: the same f32 tensors exported and imported by dlpack-rs, rust-numpy and
//! dlpark, for `benches/bench.py`.

use std::sync::Arc;

use dlpack_rs::pyo3_glue::{
    CContig, Dims, ImportOptions, PyTensor, TensorView, TensorViewMut, ANY,
};
use dlpack_rs::IntoDLPack;
use numpy::{
    IntoPyArray, PyArray1, PyReadonlyArrayDyn, PyReadwriteArrayDyn, PyUntypedArrayMethods,
};
use pyo3::prelude::*;

/// dlpack-rs: a derived frozen pyclass over a `Vec<f32>`.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct Ours {
    #[dlpack(data)]
    data: Vec<f32>,
}

#[pyfunction]
fn ours(n: usize) -> Ours {
    Ours { data: vec![1.0; n] }
}

/// rust-numpy: hands a `Vec<f32>` to numpy (`into_pyarray` consumes it, so each call clones the
/// Vec first, as a holder of the data would have to).
#[pyclass(frozen)]
struct RustNumpy {
    data: Vec<f32>,
}

#[pymethods]
impl RustNumpy {
    #[new]
    fn new(n: usize) -> Self {
        RustNumpy { data: vec![1.0; n] }
    }

    fn to_numpy<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f32>> {
        self.data.clone().into_pyarray(py)
    }
}

/// dlpark: a reusable exporter over an `Arc<Vec<f32>>` (the managed tensor holds an Arc clone).
#[pyclass(frozen)]
struct Dlpark {
    data: Arc<Vec<f32>>,
}

impl Dlpark {
    fn export<M: dlpark::ManagedTensorBase>(&self) -> PyResult<dlpark::Managed<M>> {
        use dlpark::allocation::fixed::Allocation;
        let alloc = Allocation::<M, 1>::allocate()
            .map_err(|e| pyo3::exceptions::PyBufferError::new_err(e.to_string()))?;
        let mut init = alloc.initialize(Arc::clone(&self.data));
        init.shape_mut()[0] = self.data.len() as i64;
        init.strides_mut()[0] = 1;
        let shape = init.shape_mut().as_mut_ptr();
        let strides = init.strides_mut().as_mut_ptr();
        let tensor = init.tensor_mut();
        tensor.shape = shape;
        tensor.strides = strides;
        init.set_data(self.data.as_ptr() as *mut std::ffi::c_void)
            .set_device(dlpark::ffi::DLDevice::CPU)
            .set_dtype(dlpark::ffi::DLDataType::of::<f32>());
        // SAFETY: the Arc context keeps the data alive; shape and strides describe it.
        Ok(unsafe { init.finish() })
    }
}

impl dlpark::python::DlpackExporter for Dlpark {
    fn device(&self) -> dlpark::ffi::DLDevice {
        dlpark::ffi::DLDevice::CPU
    }
    fn flags(&self) -> dlpark::DlpackFlags {
        dlpark::DlpackFlags::empty()
    }
    fn prepare_export(
        &self,
        _py: Python<'_>,
        _request: &dlpark::python::ExportRequest<'_>,
    ) -> PyResult<()> {
        Ok(())
    }
    fn export_legacy(
        &self,
        _py: Python<'_>,
    ) -> PyResult<dlpark::Managed<dlpark::ffi::DLManagedTensor>> {
        self.export()
    }
    fn export_versioned(
        &self,
        _py: Python<'_>,
    ) -> PyResult<dlpark::Managed<dlpark::ffi::DLManagedTensorVersioned>> {
        self.export()
    }
}

#[pymethods]
impl Dlpark {
    #[new]
    fn new(n: usize) -> Self {
        Dlpark {
            data: Arc::new(vec![1.0; n]),
        }
    }

    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let request =
            dlpark::python::ExportRequest::parse(stream.as_ref(), max_version, dl_device, copy)?;
        dlpark::python::export_dlpack(self, py, request)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }
}

/// Import via dlpack-rs (`PyTensor`, exchange API when the producer has one).
#[pyfunction]
fn numel_ours(t: PyTensor) -> usize {
    t.numel()
}

/// Import via dlpack-rs returning the number of dimensions: the size-scaling cases use it for
/// both sizes, since a `numel` result of 10^8 costs a Python int allocation that 1 does not.
#[pyfunction]
fn ndim_ours(t: PyTensor) -> usize {
    t.ndim()
}

/// Import via dlpack-rs and read the first element through one borrowed view (`as_slice`:
/// dtype, layout and alignment checks, a shared borrow in the registry, its release).
#[pyfunction]
fn first_ours(t: PyTensor) -> PyResult<f32> {
    Ok(t.as_slice::<f32>()?[0])
}

/// As `first_ours`, through ten views one after the other: (this - first_ours) / 9 is the
/// cost of one borrowed view.
#[pyfunction]
fn first_ours_x10(t: PyTensor) -> PyResult<f32> {
    let mut sum = 0.0;
    for _ in 0..10 {
        sum += std::hint::black_box(t.as_slice::<f32>()?)[0];
    }
    Ok(sum)
}

/// Import via dlpack-rs with the exchange API off (always `__dlpack__`).
#[pyfunction]
fn numel_ours_dunder(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(ImportOptions::new()
        .exchange_api(false)
        .import(obj)?
        .numel())
}

/// Import via rust-numpy.
#[pyfunction]
fn numel_rust_numpy(a: PyReadonlyArrayDyn<'_, f32>) -> usize {
    a.len()
}

/// Writable import via rust-numpy.
#[pyfunction]
fn numel_rust_numpy_rw(a: PyReadwriteArrayDyn<'_, f32>) -> usize {
    a.len()
}

/// Import via dlpark (`from_dlpack`, exchange API when the producer has one).
#[pyfunction]
fn numel_dlpark(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    let imported = dlpark::python::from_dlpack(obj.as_borrowed(), None, None)?;
    let t = imported
        .validate()
        .map_err(|e| pyo3::exceptions::PyBufferError::new_err(e.to_string()))?;
    Ok(t.shape().iter().product::<i64>() as usize)
}

/// Import of three tensors in one call (the per-extra-tensor cost: this minus `numel_ours`, / 2).
#[pyfunction]
fn numel3_ours(a: PyTensor, b: PyTensor, c: PyTensor) -> usize {
    a.numel() + b.numel() + c.numel()
}

/// Three imports in one call, each read through one borrowed view: the untyped counterpart of
/// three typed arguments (the same checks and borrows, made by `as_slice`).
#[pyfunction]
fn first3_ours(a: PyTensor, b: PyTensor, c: PyTensor) -> PyResult<f32> {
    Ok(a.as_slice::<f32>()?[0] + b.as_slice::<f32>()?[0] + c.as_slice::<f32>()?[0])
}

/// Import via dlpack-rs as a typed argument (`TensorView<'_, f32, Dims<ANY>, CContig>`: dtype checked, a shared
/// registry borrow held for the call; torch's exchange table fills a non-owning `DLTensor`).
#[pyfunction]
fn numel_typed(t: TensorView<'_, f32, Dims<ANY>, CContig>) -> usize {
    t.len()
}

/// A writable typed argument (`TensorViewMut<'_, f32, Dims<ANY>, CContig>`: an exclusive borrow).
#[pyfunction]
fn numel_typed_mut(t: TensorViewMut<'_, f32, Dims<ANY>, CContig>) -> usize {
    t.len()
}

/// Three typed arguments in one call.
#[pyfunction]
fn numel3_typed(
    a: TensorView<'_, f32, Dims<ANY>, CContig>,
    b: TensorView<'_, f32, Dims<ANY>, CContig>,
    c: TensorView<'_, f32, Dims<ANY>, CContig>,
) -> usize {
    a.len() + b.len() + c.len()
}

/// A `#[pyfunction]` that does nothing with its argument: the call's own cost (the floor of
/// an import is this plus the producer's own `__dlpack__`).
#[pyfunction]
fn nop(_obj: &Bound<'_, PyAny>) {}

/// A new 1-element Rust tensor returned to torch (`Returned<Torch>`: torch's exchange table),
/// against `torch.from_dlpack(derived)`.
#[pyfunction]
fn to_torch_ours(
    n: usize,
) -> PyResult<dlpack_rs::pyo3_glue::Returned<dlpack_rs::pyo3_glue::Torch>> {
    let t = dlpack_rs::safe::Export::new(vec![1.0f32; n]).versioned()?;
    Ok(dlpack_rs::pyo3_glue::Returned::new(t))
}

/// A new 1x1 RGB `ImageBuffer` exported (`IntoDLPack`) as a `dlpack_rs.Tensor`: against the
/// same three bytes as a `Vec` through `Export`.
#[pyfunction]
fn image_export() -> PyResult<dlpack_rs::pyo3_glue::DLPackTensor> {
    use dlpack_rs::IntoDLPack;
    let img = dlpack_rs::image::ImageBuffer::from_pixel(1, 1, dlpack_rs::image::Rgb([1u8, 2, 3]));
    Ok(dlpack_rs::pyo3_glue::DLPackTensor::new(
        img.into_managed_tensor_versioned()?,
    ))
}

/// Three bytes as an `(1, 1, 3)` `Vec` export, the baseline of `image_export`.
#[pyfunction]
fn vec_export() -> PyResult<dlpack_rs::pyo3_glue::DLPackTensor> {
    let t = dlpack_rs::safe::Export::new(vec![1u8, 2, 3])
        .shape(&[1, 1, 3])
        .versioned()?;
    Ok(dlpack_rs::pyo3_glue::DLPackTensor::new(t))
}

/// Every tensor of a safetensors file, mapped, as `dlpack_rs.Tensor`s (read-only, zero-copy):
/// `[(name, tensor)]`, for `torch.from_dlpack` (against the safetensors package's `load_file`
/// and `safe_open`).
#[pyfunction]
fn checkpoint(path: &str) -> PyResult<Vec<(String, dlpack_rs::pyo3_glue::DLPackTensor)>> {
    // SAFETY: the benchmark writes the file once, before it is mapped, and never again.
    let file = unsafe { dlpack_rs::safe::SafeTensorsFile::map(path) }?;
    file.names()
        .map(|name| {
            let tensor = file.tensor(name).expect("a listed name")?;
            Ok((
                name.to_string(),
                dlpack_rs::pyo3_glue::DLPackTensor::new(tensor),
            ))
        })
        .collect()
}

/// The floor of a torch import (issue 49's rule): a bare `#[pyfunction]` plus torch's own calls
/// each argument needs, nothing of ours. Per tensor: the exchange table's fill (owned, with its
/// deleter, as a `PyTensor` takes it; or non-owning, as a typed view takes it), the
/// `requires_grad` getter called directly, and `TensorBase.is_neg` by vectorcall: the cheapest
/// way to make each call, as ours makes them. The table and the getter are found once.
mod torch_floor {
    use std::ffi::c_void;

    use dlpack_rs::ffi::{DLManagedTensorVersioned, DLPackExchangeAPI, DLTensor};
    use pyo3::exceptions::PyRuntimeError;
    use pyo3::prelude::*;
    use pyo3::sync::PyOnceLock;
    use pyo3::types::PyCapsule;

    struct Floor {
        /// torch's static exchange table (an address: the table's raw pointers are not `Sync`).
        api: usize,
        grad_get: pyo3::ffi::getter,
        grad_closure: usize,
        is_neg: Py<PyAny>,
    }

    static FLOOR: PyOnceLock<Floor> = PyOnceLock::new();

    fn floor(py: Python<'_>) -> PyResult<&'static Floor> {
        FLOOR.get_or_try_init(py, || {
            let torch = py.import("torch")?;
            let tensor = torch.getattr("Tensor")?;
            let capsule = tensor
                .getattr("__dlpack_c_exchange_api__")?
                .cast_into::<PyCapsule>()?;
            let ptr =
                capsule.pointer_checked(Some(dlpack_rs::ffi::DLPACK_EXCHANGE_API_CAPSULE_NAME))?;
            let api = ptr.as_ptr() as usize;
            let base = torch.getattr("_C")?.getattr("TensorBase")?;
            let descr = base.getattr("requires_grad")?;
            // SAFETY: an exact getset descriptor of the static `TensorBase` (checked), whose
            // `d_getset` points at the type's getset table.
            let (grad_get, grad_closure) = unsafe {
                let raw = descr.as_ptr();
                if pyo3::ffi::Py_TYPE(raw) != &raw mut pyo3::ffi::PyGetSetDescr_Type {
                    return Err(PyRuntimeError::new_err("requires_grad is not a getset"));
                }
                let d = &*raw.cast::<pyo3::ffi::PyGetSetDescrObject>();
                let def = &*d.d_getset;
                (def.get.expect("a getter"), def.closure as usize)
            };
            Ok(Floor {
                api,
                grad_get,
                grad_closure,
                is_neg: base.getattr("is_neg")?.unbind(),
            })
        })
    }

    /// torch's checks of one tensor: `requires_grad` and `is_neg` (both must be false).
    fn checks(f: &Floor, t: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = t.py();
        // SAFETY: `t` is a torch tensor (the benchmark passes only those) and the getter is
        // `TensorBase`'s; a new reference or NULL comes back.
        let grad = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                (f.grad_get)(t.as_ptr(), f.grad_closure as *mut c_void),
            )
        }?;
        let args = [t.as_ptr()];
        // SAFETY: one live argument, no keywords; a new reference or NULL comes back.
        let neg = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyo3::ffi::PyObject_Vectorcall(
                    f.is_neg.as_ptr(),
                    args.as_ptr(),
                    1,
                    std::ptr::null_mut(),
                ),
            )
        }?;
        if grad.is_truthy()? || neg.is_truthy()? {
            return Err(PyRuntimeError::new_err(
                "the floor takes plain tensors only",
            ));
        }
        Ok(())
    }

    fn api(f: &Floor) -> &'static DLPackExchangeAPI {
        // SAFETY: torch's capsule holds its static exchange table, alive for the process.
        unsafe { &*(f.api as *const DLPackExchangeAPI) }
    }

    fn numel(t: &DLTensor) -> usize {
        // SAFETY: a filled tensor's shape points at `ndim` integers.
        let shape = unsafe { std::slice::from_raw_parts(t.shape, t.ndim as usize) };
        shape.iter().product::<i64>() as usize
    }

    /// One tensor taken owned, as a `PyTensor` takes it.
    fn owned(t: &Bound<'_, PyAny>) -> PyResult<usize> {
        let f = floor(t.py())?;
        checks(f, t)?;
        let mut out: *mut DLManagedTensorVersioned = std::ptr::null_mut();
        let from = api(f)
            .managed_tensor_from_py_object_no_sync
            .expect("torch's table fills");
        // SAFETY: attached; a live tensor of the table's type; a valid out pointer.
        if unsafe { from(t.as_ptr().cast(), &mut out) } != 0 || out.is_null() {
            return Err(
                PyErr::take(t.py()).unwrap_or_else(|| PyRuntimeError::new_err("fill failed"))
            );
        }
        // SAFETY: on success, an owned tensor; its deleter frees it once.
        unsafe {
            let n = numel(&(*out).dl_tensor);
            if let Some(delete) = (*out).deleter {
                delete(out);
            }
            Ok(n)
        }
    }

    /// One tensor lent, as a typed view takes it.
    fn lent(t: &Bound<'_, PyAny>) -> PyResult<usize> {
        let f = floor(t.py())?;
        checks(f, t)?;
        let mut out = std::mem::MaybeUninit::<DLTensor>::zeroed();
        let fill = api(f)
            .dltensor_from_py_object_no_sync
            .expect("torch's table lends");
        // SAFETY: attached; a live tensor of the table's type; a valid out pointer.
        if unsafe { fill(t.as_ptr().cast(), out.as_mut_ptr()) } != 0 {
            return Err(
                PyErr::take(t.py()).unwrap_or_else(|| PyRuntimeError::new_err("fill failed"))
            );
        }
        // SAFETY: filled on success; its shape is the tensor's, alive while `t` is.
        Ok(numel(unsafe { out.assume_init_ref() }))
    }

    /// The floor of `numel_ours(t)` (a `PyTensor`).
    #[pyfunction]
    pub fn floor_owned(a: &Bound<'_, PyAny>) -> PyResult<usize> {
        owned(a)
    }

    /// The floor of `numel3_ours(a, b, c)`.
    #[pyfunction]
    pub fn floor_owned3(
        a: &Bound<'_, PyAny>,
        b: &Bound<'_, PyAny>,
        c: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        Ok(owned(a)? + owned(b)? + owned(c)?)
    }

    /// The floor of `numel_typed(t)` (a `TensorView`).
    #[pyfunction]
    pub fn floor_lent(a: &Bound<'_, PyAny>) -> PyResult<usize> {
        lent(a)
    }

    /// The floor of `numel3_typed(a, b, c)`.
    #[pyfunction]
    pub fn floor_lent3(
        a: &Bound<'_, PyAny>,
        b: &Bound<'_, PyAny>,
        c: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        Ok(lent(a)? + lent(b)? + lent(c)?)
    }
}

#[pymodule]
fn dlpack_bench(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Ours>()?;
    m.add_class::<RustNumpy>()?;
    m.add_class::<Dlpark>()?;
    m.add_function(wrap_pyfunction!(ours, m)?)?;
    m.add_function(wrap_pyfunction!(numel_ours, m)?)?;
    m.add_function(wrap_pyfunction!(image_export, m)?)?;
    m.add_function(wrap_pyfunction!(vec_export, m)?)?;
    m.add_function(wrap_pyfunction!(numel_typed, m)?)?;
    m.add_function(wrap_pyfunction!(numel3_typed, m)?)?;
    m.add_function(wrap_pyfunction!(ndim_ours, m)?)?;
    m.add_function(wrap_pyfunction!(first_ours, m)?)?;
    m.add_function(wrap_pyfunction!(first_ours_x10, m)?)?;
    m.add_function(wrap_pyfunction!(numel_ours_dunder, m)?)?;
    m.add_function(wrap_pyfunction!(numel_rust_numpy, m)?)?;
    m.add_function(wrap_pyfunction!(numel_rust_numpy_rw, m)?)?;
    m.add_function(wrap_pyfunction!(numel_typed_mut, m)?)?;
    m.add_function(wrap_pyfunction!(numel_dlpark, m)?)?;
    m.add_function(wrap_pyfunction!(numel3_ours, m)?)?;
    m.add_function(wrap_pyfunction!(first3_ours, m)?)?;
    m.add_function(wrap_pyfunction!(nop, m)?)?;
    m.add_function(wrap_pyfunction!(torch_floor::floor_owned, m)?)?;
    m.add_function(wrap_pyfunction!(torch_floor::floor_owned3, m)?)?;
    m.add_function(wrap_pyfunction!(torch_floor::floor_lent, m)?)?;
    m.add_function(wrap_pyfunction!(torch_floor::floor_lent3, m)?)?;
    m.add_function(wrap_pyfunction!(to_torch_ours, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint, m)?)?;
    Ok(())
}
