//! One module per foreign library, Rust and Python sides together; public as
//! `dlpack_rs::safe::SafeTensorsFile`, `dlpack_rs::cuda`, or methods and trait impls only.

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
    let numel = validated.extent().numel;
    let mut out = alloc::vec::Vec::<T>::new();
    out.try_reserve_exact(numel)
        .map_err(|_| crate::safe::Error::OutOfMemory)?;
    // SAFETY: the source holds `T`s (this function's contract), copied whole as their bytes
    // into `out`'s room for `numel` of them; any bit pattern is a `T`, so all `numel` are set.
    unsafe {
        let esize = core::mem::size_of::<T>();
        crate::safe::copy_elements(validated, out.as_mut_ptr().cast(), esize);
        out.set_len(numel);
    }
    Ok(out)
}
