//! `image_demo`: a small Python extension built on dlpack-rs, to copy from.
//!
//! - [`Image`]: an RGB image owned by Rust. `#[derive(IntoDLPack)]` makes it a DLPack
//!   producer, so `numpy.from_dlpack(img)` and `torch.from_dlpack(img)` view its pixels
//!   without a copy; the pixels are freed when the last of them lets go.
//! - `invert`: takes *any* writable `uint8` DLPack tensor (numpy, torch, an `Image`, ...) as a
//!   typed argument and inverts it in place, through an ndarray view that honours any strides.
//! - `grayscale`: a round trip: takes an `H x W x 3` `uint8` tensor (the shape is part of the
//!   signature), computes a new Rust `Array2<u8>` and hands it back, without a copy, as the
//!   caller's own kind of array (numpy in, numpy out; torch in, torch out).

use dlpack_rs::pyo3_glue::{Dims, Framework, Returned, TensorView, TensorViewMut, ANY};
use dlpack_rs::IntoDLPack;
use ndarray::Axis;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// An `height x width x 3` RGB image of `uint8` pixels, owned by Rust.
///
/// `frozen`: Python gets no `&mut self` method that could reallocate the pixels while a
/// consumer holds a pointer into them. (Consumers may still write through their view, which
/// is the point of sharing memory.)
#[pyclass(frozen, module = "image_demo")]
#[derive(IntoDLPack)]
pub struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    shape: [usize; 3],
}

#[dlpack_rs::pymethods]
impl Image {
    /// A test pattern: red grows along x, green along y, blue is constant.
    #[new]
    fn new(height: usize, width: usize) -> PyResult<Self> {
        let len = height
            .checked_mul(width)
            .and_then(|n| n.checked_mul(3))
            .ok_or_else(|| PyValueError::new_err("image too large"))?;
        let mut pixels = Vec::with_capacity(len);
        for y in 0..height {
            for x in 0..width {
                pixels.extend_from_slice(&[
                    (x * 255 / (width - 1).max(1)) as u8,
                    (y * 255 / (height - 1).max(1)) as u8,
                    64,
                ]);
            }
        }
        Ok(Image {
            pixels,
            shape: [height, width, 3],
        })
    }

    /// `(height, width, 3)`.
    #[getter]
    fn shape(&self) -> (usize, usize, usize) {
        (self.shape[0], self.shape[1], self.shape[2])
    }

    /// The address of the first pixel (compare with `ndarray.ctypes.data` or
    /// `tensor.data_ptr()` to see that the memory is shared).
    #[getter]
    fn data_ptr(&self) -> usize {
        self.pixels.as_ptr() as usize
    }

    fn __repr__(&self) -> String {
        format!("Image(height={}, width={})", self.shape[0], self.shape[1])
    }
}

/// Inverts the `uint8` values of any writable CPU tensor in place (`x -> 255 - x`), whatever
/// its strides. Returns the number of values changed.
///
/// The signature says it all: `uint8`, any shape, any layout, written in place. A caller's
/// float tensor gets `TypeError`, a read-only one `BufferError` saying why.
#[pyfunction]
fn invert(mut tensor: TensorViewMut<'_, u8>) -> usize {
    let mut view = tensor.view_mut();
    view.mapv_inplace(|x| 255 - x);
    view.len()
}

/// Round trip: an `H x W x 3` `uint8` tensor in, its luma (`0.299 R + 0.587 G + 0.114 B`) out
/// as a new Rust-owned `H x W` array, handed back as the caller's framework's own type.
///
/// `Dims<3, ANY, ANY, 3>` checks the three channels at extraction: a 4-channel image gets
/// `TypeError: expected shape (*, *, 3), got (480, 640, 4)`.
#[pyfunction]
fn grayscale(
    py: Python<'_>,
    rgb: TensorView<'_, u8, Dims<3, ANY, ANY, 3>>,
) -> PyResult<Returned<Framework>> {
    let gray = rgb.view().map_axis(Axis(2), |px| {
        (0.299 * px[0] as f32 + 0.587 * px[1] as f32 + 0.114 * px[2] as f32).round() as u8
    });
    Ok(Returned::like(
        py,
        rgb.framework(),
        gray.into_managed_tensor_versioned()?,
    ))
}

/// The native module; `image_demo/__init__.py` re-exports it. Declared inline, so that
/// `maturin generate-stubs` (feature `stubs`) can read what it holds.
#[pymodule(gil_used = false)]
mod _native {
    #[pymodule_export]
    use super::{grayscale, invert, Image};
    #[pymodule_export]
    use dlpack_rs::pyo3_glue::DLPackTensor;
}
