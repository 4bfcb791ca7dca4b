//! One module per foreign library, Rust and Python sides together. Public paths:
//! `dlpack_rs::safe::ndarray`, `dlpack_rs::safe::{SafeTensorsFile, serialize_safetensors}`,
//! `dlpack_rs::cuda`; `image` adds trait impls and `TensorView::as_image`.

#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cudarc")]
pub mod cudarc;
#[cfg(feature = "image")]
mod image;
#[cfg(feature = "ndarray")]
pub mod ndarray;
#[cfg(feature = "safetensors")]
pub(crate) mod safetensors;
