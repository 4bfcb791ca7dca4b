//! `image` buffers as tensors (feature `image`): an [`ImageBuffer`] exports zero-copy as a
//! `(height, width, channels)` tensor ([`IntoDLPack`], [`Buffer`]); with `pyo3`, typed
//! arguments view such a tensor as an `ImageBuffer` (`TensorView::as_image`).
//!
//! ```
//! use dlpack_rs::IntoDLPack;
//! use dlpack_rs::image::{ImageBuffer, Rgb};
//!
//! let img: ImageBuffer<Rgb<u8>, Vec<u8>> = ImageBuffer::from_pixel(4, 2, Rgb([10, 20, 30]));
//! let tensor = img.into_managed_tensor_versioned()?;
//! assert_eq!(tensor.shape(), &[2, 4, 3]); // height, width, channels
//! assert_eq!(&tensor.as_slice::<u8>()?[..3], &[10, 20, 30]);
//! # Ok::<(), dlpack_rs::safe::Error>(())
//! ```

#[cfg(feature = "pyo3")]
mod views;

use core::ffi::c_void;

use image::{ImageBuffer, Pixel};

use crate::safe::{cpu_device, Buffer, Element, TensorInfo};
use crate::IntoDLPack;

/// The `(height, width, channels)` of `img`; height 0 if its pixels do not fit its container.
fn shape_of<P: Pixel>(img: &ImageBuffer<P, Vec<P::Subpixel>>) -> [i64; 3] {
    let (width, height) = img.dimensions();
    let channels = P::CHANNEL_COUNT as usize;
    let fits = (width as usize)
        .checked_mul(height as usize)
        .and_then(|n| n.checked_mul(channels))
        .is_some_and(|n| n <= img.as_raw().len());
    if fits {
        [height as i64, width as i64, channels as i64]
    } else {
        [0, width as i64, channels as i64]
    }
}

/// Exports the pixels as a row-major `(height, width, channels)` tensor kept alive by the image.
// SAFETY: the pixels live in the image's `Vec`, whose heap allocation does not move with it; the
// shape lies within the vector (`shape_of`). `Vec::as_ptr` takes no reference, and the image
// owns its pixels uniquely; `P::Subpixel: Element` makes the dtype the elements' own.
unsafe impl<P> IntoDLPack for ImageBuffer<P, Vec<P::Subpixel>>
where
    P: Pixel,
    P::Subpixel: Element,
{
    fn tensor_info(&self) -> TensorInfo {
        TensorInfo::contiguous(
            self.as_raw().as_ptr().cast_mut().cast::<c_void>(),
            cpu_device(),
            P::Subpixel::DTYPE,
            shape_of(self).to_vec(),
        )
    }
}

// SAFETY: as above: `len` initialised subpixels; the raw pointer is writable
// (`SHARED_PTR_WRITABLE`), and no `&self` method of an image writes its pixels.
unsafe impl<P> Buffer for ImageBuffer<P, Vec<P::Subpixel>>
where
    P: Pixel,
    P::Subpixel: Element,
{
    type Elem = P::Subpixel;
    const SHARED_PTR_WRITABLE: bool = true;
    fn data_ptr(&self) -> *mut P::Subpixel {
        self.as_raw().as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.as_raw().len()
    }
}

/// The `(width, height)` of a `(H, W, C)` shape with `P`'s channel count (or one-channel `(H, W)`).
#[cfg(feature = "pyo3")]
pub(crate) fn image_dims<P: Pixel>(shape: &[i64]) -> Option<(u32, u32)> {
    let channels = i64::from(P::CHANNEL_COUNT);
    let (height, width) = match *shape {
        [h, w, c] if c == channels => (h, w),
        [h, w] if channels == 1 => (h, w),
        _ => return None,
    };
    Some((u32::try_from(width).ok()?, u32::try_from(height).ok()?))
}
