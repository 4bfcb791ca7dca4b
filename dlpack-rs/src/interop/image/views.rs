//! Typed arguments viewed zero-copy as `image` buffers (features `pyo3` and `image`).

use image::{ImageBuffer, Pixel};

use super::image_dims;
use crate::pyo3_glue::{Cpu, Layout, Shape, TensorView, TensorViewMut};

impl<T, S: Shape, L: Layout> TensorView<'_, T, S, L, Cpu> {
    /// The elements as an [`ImageBuffer`] of `P` pixels borrowing them: `None` unless the tensor
    /// is C-contiguous of shape `(height, width, channels)` with `P`'s channel count (or
    /// `(height, width)` for one channel) and sides that fit in `u32`.
    ///
    /// ```
    /// use dlpack_rs::pyo3_glue::{CContig, Dims, TensorView, ANY};
    /// use dlpack_rs::image::Rgb;
    /// use pyo3::prelude::*;
    ///
    /// #[pyfunction]
    /// fn mean_red(img: TensorView<'_, u8, Dims<3, ANY, ANY, 3>, CContig>) -> Option<f64> {
    ///     let img = img.as_image::<Rgb<u8>>()?;
    ///     let n = (img.width() * img.height()).max(1) as f64;
    ///     Some(img.pixels().map(|p| p[0] as f64).sum::<f64>() / n)
    /// }
    /// # fn main() {}
    /// ```
    pub fn as_image<P: Pixel<Subpixel = T>>(&self) -> Option<ImageBuffer<P, &[T]>> {
        let (width, height) = image_dims::<P>(self.shape())?;
        ImageBuffer::from_raw(width, height, self.as_slice()?)
    }
}

impl<T, S: Shape, L: Layout> TensorViewMut<'_, T, S, L, Cpu> {
    /// The elements as a mutable [`ImageBuffer`], as [`TensorView::as_image`]; edits are in place.
    pub fn as_image_mut<P: Pixel<Subpixel = T>>(&mut self) -> Option<ImageBuffer<P, &mut [T]>> {
        let (width, height) = image_dims::<P>(self.shape())?;
        ImageBuffer::from_raw(width, height, self.as_slice_mut()?)
    }
}
