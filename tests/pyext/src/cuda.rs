//! The cudarc paths for the GPU check (`tests/gpu/check.py`; feature `cudarc`): a Rust
//! `CudaSlice` exported to torch, torch tensors imported as cudarc views, all on a stream of
//! the extension's own (non-blocking, so that only the documented ordering makes work visible).

use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaStream, DevicePtr};
use dlpack_rs::cuda::CudaTensor;
use dlpack_rs::pyo3_glue::DLPackTensor;
use dlpack_rs::safe::Error;
use dlpack_rs::safe::Export;
use pyo3::prelude::*;

/// The extension's stream on device 0.
fn stream() -> PyResult<Arc<CudaStream>> {
    static STREAM: OnceLock<Arc<CudaStream>> = OnceLock::new();
    if let Some(s) = STREAM.get() {
        return Ok(s.clone());
    }
    let ctx = CudaContext::new(0).map_err(Error::from)?;
    let s = ctx.new_stream().map_err(Error::from)?;
    Ok(STREAM.get_or_init(|| s).clone())
}

/// `0.0, 1.0, ... n - 1` in a `CudaSlice` written on the extension's stream, exported
/// zero-copy (the consumer's stream is ordered after that write by `__dlpack__(stream=...)`).
#[pyfunction]
fn cuda_arange(n: usize) -> PyResult<DLPackTensor> {
    let stream = stream()?;
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let slice = stream.clone_htod(&host).map_err(Error::from)?;
    Ok(DLPackTensor::from_export(Export::new(slice))?)
}

/// The sum of a float32 CUDA tensor, read on the extension's stream through a cudarc view
/// (ordered after the producer's work by `CudaTensor::import`), and its device pointer.
#[pyfunction]
fn cuda_sum(obj: &Bound<'_, PyAny>) -> PyResult<(f64, u64)> {
    let stream = stream()?;
    let tensor = CudaTensor::<f32>::import(obj, &stream)?;
    let view = tensor.as_view();
    let ptr = view.device_ptr(&stream).0;
    let host = stream.clone_dtoh(&view).map_err(Error::from)?;
    Ok((host.iter().map(|&v| f64::from(v)).sum(), ptr))
}

/// Writes `value` into every element of a float32 CUDA tensor through a mutable cudarc view on
/// the extension's stream; dropping the view waits for the write.
#[pyfunction]
fn cuda_fill(obj: &Bound<'_, PyAny>, value: f32) -> PyResult<()> {
    let stream = stream()?;
    let mut tensor = CudaTensor::<f32>::import_mut(obj, &stream)?;
    let host = vec![value; tensor.len()];
    let mut view = tensor.as_view_mut()?;
    stream.memcpy_htod(&host, &mut view).map_err(Error::from)?;
    Ok(())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cuda_arange, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_sum, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_fill, m)?)?;
    Ok(())
}
