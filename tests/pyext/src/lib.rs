//! `dlpack_testext`: the extension module the Python interop suite imports. It exports
//! tensors from Rust (the ready-made `dlpack_rs.Tensor` and an `IntoDLPack` class), imports
//! any DLPack object and reports what it sees, writes in place, and counts deleter calls.

mod consumer;
mod cross;
#[cfg(feature = "cudarc")]
mod cuda;
mod derived;
mod exchange;
mod hardening;
mod heap;
mod held;
mod images;
mod keepalive_dropper;
mod keepalive_liveness;
mod low_precision;
mod ndarray_funcs;
mod oversized;
mod producer;
mod readers;
mod rust_numpy;
mod shapes;
mod shared_mut;
mod streams;
mod tensor_files;
mod typed_args;

pub(crate) use consumer::{gather, Imported};
pub(crate) use producer::{new_rust_tensor, parse_dtype, Chunk};
use pyo3::prelude::*;

/// numpy's, torch's and jax's name of a dtype.
pub(crate) fn dtype_name(dtype: dlpack_rs::ffi::DLDataType) -> String {
    dtype.name().to_string()
}

#[pymodule(gil_used = false)]
fn dlpack_testext(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<dlpack_rs::pyo3_glue::DLPackTensor>()?;
    producer::register(m)?;
    held::register(m)?;
    consumer::register(m)?;
    derived::register_derived(m)?;
    shapes::register(m)?;
    heap::register(m)?;
    images::register(m)?;
    hardening::register(m)?;
    hardening::register_probes(m)?;
    hardening::register_views(m)?;
    hardening::register_typed(m)?;
    ndarray_funcs::register(m)?;
    oversized::register(m)?;
    low_precision::register(m)?;
    exchange::register(m)?;
    streams::register(m)?;
    tensor_files::register(m)?;
    readers::register(m)?;
    keepalive_dropper::register(m)?;
    keepalive_liveness::register(m)?;
    keepalive_liveness::register_locking(m)?;
    keepalive_liveness::register_exit(m)?;
    shared_mut::register(m)?;
    rust_numpy::register(m)?;
    typed_args::register(m)?;
    cross::register(m)?;
    #[cfg(feature = "cudarc")]
    cuda::register(m)?;
    Ok(())
}
