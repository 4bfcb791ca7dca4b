//! One module per foreign library, Rust and Python sides together. Public paths:
//! `dlpack_rs::safe::SafeTensorsFile`, `dlpack_rs::cuda`; `ndarray` and `image` add methods and
//! trait impls (`Managed::as_array`, `TensorView::as_image`).

#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cudarc")]
pub mod cudarc;
#[cfg(feature = "image")]
mod image;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(feature = "safetensors")]
pub(crate) mod safetensors;
