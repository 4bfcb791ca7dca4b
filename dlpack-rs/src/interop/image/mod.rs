//! `image`'s buffers as tensors (feature `image`, image 0.25): an [`ImageBuffer`] of any pixel
//! type whose subpixel is an [`Element`] exports zero-copy as an `(height, width, channels)`
//! tensor ([`IntoDLPack`], and [`Buffer`] for a `#[dlpack(data)]` field or a
//! [`safe::Export`](crate::safe::Export)); typed Python arguments view a C-contiguous tensor of
//! that shape as an `ImageBuffer` borrowing its elements (`TensorView::as_image`, feature
//! `pyo3`).
//!
//! ```
//! use dlpack_rs::IntoDLPack;
//! use dlpack_rs::image::{ImageBuffer, Rgb};
//!
//! let img: ImageBuffer<Rgb<u8>, Vec<u8>> = ImageBuffer::from_pixel(4, 2, Rgb([10, 20, 30]));
//! let pixels = img.as_raw().as_ptr();
//! let tensor = img.into_managed_tensor_versioned()?;
//! assert_eq!(tensor.shape(), &[2, 4, 3]); // height, width, channels
//! assert_eq!(tensor.data_ptr(), pixels.cast_mut().cast()); // the image's own pixels
//! assert_eq!(&tensor.as_slice::<u8>()?[..3], &[10, 20, 30]);
//! # Ok::<(), dlpack_rs::safe::Error>(())
//! ```

#[cfg(feature = "pyo3")]
mod views;

use core::ffi::c_void;

use image::{ImageBuffer, Pixel};

use crate::safe::{cpu_device, Buffer, Element, TensorInfo};
use crate::IntoDLPack;

/// The `(height, width, channels)` of `img` when its pixels fit in its container (image's own
/// invariant, checked here all the same: an image that did not fit would export as empty).
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

/// Exports the image's pixels as an `(height, width, channels)` row-major tensor, the image
/// being the keepalive: `Luma` has one channel, `Rgb` three, `Rgba` four.
// SAFETY: the pixels live in the image's `Vec`, one heap allocation that moving the image does
// not move; the shape addresses `height * width * channels` elements, checked to lie within the
// vector (`shape_of`). `Vec::as_ptr` reads the vector's raw pointer without a reference to the
// elements, and the image owns them uniquely, so consumer writes touch memory nothing else
// relies on. `P::Subpixel: Element` makes the dtype the elements' own.
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

// SAFETY: as above: the vector's heap allocation holds `len` initialised subpixels and moves
// with nothing; the pointer is the vector's raw pointer (`SHARED_PTR_WRITABLE`), and no `&self`
// method of an image writes its pixels.
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

/// The `(width, height)` of an image of `P` pixels whose elements have `shape`: `(H, W, C)`
/// with `C` the pixel's channel count, or `(H, W)` for one channel; `None` otherwise or when a
/// side does not fit in `u32`.
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
