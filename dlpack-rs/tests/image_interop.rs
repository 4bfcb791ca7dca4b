//! `image` integration from outside (feature `image`): `ImageBuffer` exports as an
//! `(height, width, channels)` tensor over the image's own pixels, for every pixel type whose
//! subpixel is an element, through `IntoDLPack`, `Export` and a derived field.
#![cfg(feature = "image")]

use dlpack_rs::ffi::{DLDataType, DLPACK_FLAG_BITMASK_READ_ONLY};
use dlpack_rs::image::{ImageBuffer, Luma, Rgb, Rgba};
use dlpack_rs::safe::{Buffer, Export};
use dlpack_rs::IntoDLPack;

#[test]
fn an_rgb_image_exports_height_width_channels_over_its_own_pixels() {
    let img = ImageBuffer::from_fn(4, 2, |x, y| Rgb([x as u8, y as u8, 7]));
    let pixels = img.as_raw().as_ptr();
    let t = img.into_managed_tensor_versioned().unwrap();
    assert_eq!(t.shape(), &[2, 4, 3]);
    assert_eq!(&*t.strides(), &[12, 3, 1]);
    assert_eq!(t.dtype(), DLDataType::UINT8);
    assert_eq!(t.data_ptr().cast_const(), pixels.cast());
    assert_eq!(t.flags() & DLPACK_FLAG_BITMASK_READ_ONLY, 0); // the export owns the image
    let s = t.as_slice::<u8>().unwrap();
    // Row y = 1, column x = 3: [3, 1, 7].
    assert_eq!(&s[(4 + 3) * 3..(4 + 3) * 3 + 3], &[3, 1, 7]);
}

#[test]
fn every_channel_count_and_subpixel_type_keeps_its_dtype() {
    let luma: ImageBuffer<Luma<u16>, Vec<u16>> = ImageBuffer::from_pixel(3, 5, Luma([600]));
    let t = luma.into_managed_tensor().unwrap();
    assert_eq!(
        (t.shape(), t.dtype()),
        (&[5i64, 3, 1][..], DLDataType::UINT16)
    );
    assert_eq!(t.as_slice::<u16>().unwrap(), &[600; 15]);

    let rgba: ImageBuffer<Rgba<f32>, Vec<f32>> =
        ImageBuffer::from_pixel(2, 1, Rgba([0.5, 0.25, 1.0, 1.0]));
    let t = rgba.into_managed_tensor_versioned().unwrap();
    assert_eq!(
        (t.shape(), t.dtype()),
        (&[1i64, 2, 4][..], DLDataType::FLOAT32)
    );
    assert_eq!(
        t.as_slice::<f32>().unwrap(),
        &[0.5, 0.25, 1.0, 1.0, 0.5, 0.25, 1.0, 1.0]
    );
}

#[test]
fn an_empty_image_exports_an_empty_tensor() {
    let img: ImageBuffer<Rgb<u8>, Vec<u8>> = ImageBuffer::new(0, 3);
    let t = img.into_managed_tensor_versioned().unwrap();
    assert_eq!(t.shape(), &[3, 0, 3]);
    assert_eq!(t.as_slice::<u8>().unwrap(), &[] as &[u8]);
}

#[test]
fn a_larger_container_exports_only_the_image_and_export_takes_any_shape_within_it() {
    // `from_raw` accepts a container longer than the image: only the image is exported.
    let img: ImageBuffer<Rgb<u8>, Vec<u8>> =
        ImageBuffer::from_raw(1, 1, vec![1, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(Buffer::num_elements(&img), 6);
    let t = img.clone().into_managed_tensor_versioned().unwrap();
    assert_eq!(
        (t.shape(), &*t.as_slice::<u8>().unwrap()),
        (&[1i64, 1, 3][..], &[1u8, 2, 3][..])
    );
    // As a `Buffer`, the whole container, shaped by the caller (and checked against it).
    let t = Export::new(img.clone()).shape(&[2, 3]).versioned().unwrap();
    assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 2, 3, 4, 5, 6]);
    assert!(Export::new(img).shape(&[7]).versioned().is_err());
}

#[cfg(feature = "derive")]
#[test]
fn an_image_field_backs_a_derived_struct() {
    #[derive(IntoDLPack)]
    struct Frame {
        #[dlpack(data)]
        image: ImageBuffer<Rgb<u8>, Vec<u8>>,
        #[dlpack(shape)]
        shape: [usize; 3],
    }
    let image = ImageBuffer::from_pixel(2, 2, Rgb([9u8, 8, 7]));
    let t = Frame {
        image,
        shape: [2, 2, 3],
    }
    .into_managed_tensor_versioned()
    .unwrap();
    assert_eq!(t.shape(), &[2, 2, 3]);
    assert_eq!(&t.as_slice::<u8>().unwrap()[..3], &[9, 8, 7]);
}
