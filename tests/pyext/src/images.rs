//! `image` buffers both ways (feature `image`): an `ImageBuffer` exported zero-copy as
//! `(H, W, C)`, and typed arguments viewed as `ImageBuffer`s.

use dlpack_rs::image::{imageops, ImageBuffer, Luma, Rgb};
use dlpack_rs::pyo3_glue::{
    CContig, DLPackTensor, Dims, Numpy, Returned, TensorView, TensorViewMut, ANY,
};
use dlpack_rs::IntoDLPack;
use pyo3::prelude::*;

/// A `height x width` RGB test image (red = x, green = y, blue = 200) as a `dlpack_rs.Tensor`,
/// and the address of its pixels.
#[pyfunction]
fn img_rgb(height: u32, width: u32) -> PyResult<(DLPackTensor, usize)> {
    let img = ImageBuffer::from_fn(width, height, |x, y| Rgb([x as u8, y as u8, 200]));
    let ptr = img.as_raw().as_ptr() as usize;
    Ok((DLPackTensor::new(img.into_managed_tensor_versioned()?), ptr))
}

/// A `height x width` float32 luma ramp (`x + 10 y`), returned as a numpy array.
#[pyfunction]
fn img_luma_f32(height: u32, width: u32) -> PyResult<Returned<Numpy>> {
    let img: ImageBuffer<Luma<f32>, Vec<f32>> =
        ImageBuffer::from_fn(width, height, |x, y| Luma([x as f32 + 10.0 * y as f32]));
    Ok(Returned::from_value(img)?)
}

/// The sum of each channel of an RGB `uint8` image, read through `as_image` (`None` when the
/// tensor is not C-contiguous).
#[pyfunction]
fn img_channel_sums(img: TensorView<'_, u8, Dims<3, ANY, ANY, 3>>) -> Option<(u64, u64, u64)> {
    let img = img.as_image::<Rgb<u8>>()?;
    Some(img.pixels().fold((0, 0, 0), |(r, g, b), p| {
        (r + p[0] as u64, g + p[1] as u64, b + p[2] as u64)
    }))
}

/// The `(width, height)` `as_image::<Luma<f32>>` sees in a 2-D or `(H, W, 1)` float32 tensor, or
/// `None`.
#[pyfunction]
fn img_luma_dims(t: TensorView<'_, f32, Dims<ANY>, CContig>) -> Option<(u32, u32)> {
    t.as_image::<Luma<f32>>().map(|img| img.dimensions())
}

/// Inverts an RGB `uint8` image in place with `image::imageops::invert`, through
/// `as_image_mut`; false when the tensor is not C-contiguous.
#[pyfunction]
fn img_invert(mut img: TensorViewMut<'_, u8, Dims<3, ANY, ANY, 3>>) -> bool {
    match img.as_image_mut::<Rgb<u8>>() {
        Some(mut view) => {
            imageops::invert(&mut view);
            true
        }
        None => false,
    }
}

/// Adds this file's functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(img_rgb, m)?)?;
    m.add_function(wrap_pyfunction!(img_luma_f32, m)?)?;
    m.add_function(wrap_pyfunction!(img_channel_sums, m)?)?;
    m.add_function(wrap_pyfunction!(img_luma_dims, m)?)?;
    m.add_function(wrap_pyfunction!(img_invert, m)?)?;
    Ok(())
}
