//! One module per foreign library, Rust and Python sides together. Public paths:
//! `dlpack_rs::safe::SafeTensorsFile`, `dlpack_rs::cuda`; `ndarray` and `image` add methods and
//! trait impls (`Managed::as_array`, `TensorView::as_image`).

#[cfg(feature = "burn")]
mod burn;
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

/// The elements `validated` describes, in C order, in a new vector (`Error::OutOfMemory` for a
/// broadcast too large to allocate): the one copy of the candle and burn imports.
///
/// # Safety
/// `validated` describes initialised host memory of `T`s that nobody writes during the call.
#[cfg(any(feature = "candle", feature = "burn"))]
pub(crate) unsafe fn gather<T: crate::safe::AnyBitPattern>(
    validated: &crate::safe::Validated,
) -> Result<alloc::vec::Vec<T>, crate::safe::Error> {
    let info = validated.info();
    let numel = validated.extent().numel;
    let mut out = alloc::vec::Vec::new();
    out.try_reserve_exact(numel)
        .map_err(|_| crate::safe::Error::OutOfMemory)?;
    let first = info
        .data
        .cast::<u8>()
        .wrapping_add(info.byte_offset as usize)
        .cast::<T>();
    let ndim = info.shape.len();
    let strides = info
        .strides
        .clone()
        .unwrap_or_else(|| crate::safe::compact_strides(&info.shape));
    let mut index = alloc::vec![0i64; ndim];
    for _ in 0..numel {
        let offset: i64 = index.iter().zip(&strides).map(|(&k, &s)| k * s).sum();
        // SAFETY: `index` is within the shape, so the element is one the validated layout
        // addresses (caller's contract); read unaligned, any bit pattern is a `T`.
        out.push(unsafe { first.offset(offset as isize).read_unaligned() });
        for axis in (0..ndim).rev() {
            index[axis] += 1;
            if index[axis] < info.shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    Ok(out)
}
