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
    m.add_function(wrap_pyfunction!(to_torch_ours, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint, m)?)?;
    Ok(())
}
