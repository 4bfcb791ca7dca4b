//! The main job of dlpack-rs, end to end and without Python: a producer exports Rust memory
//! as a DLPack managed tensor, a consumer takes it over, reads it without copying, and
//! releases it; the producer's memory is freed exactly once, by the deleter.
//!
//! Run with `cargo run -p dlpack-rs --example demo` (or `bash tests/demo.sh`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_rs::ffi::{DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY};
use dlpack_rs::safe::{
    cpu_device, dtype_f32, pack_versioned, Export, ManagedTensorVersioned, TensorInfo,
};

/// How many times a producer's keepalive was dropped.
static DROPS: AtomicUsize = AtomicUsize::new(0);

/// The producer's memory, with a `Drop` that reports when the deleter frees it.
struct Image {
    pixels: Vec<f32>,
}

impl Drop for Image {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::SeqCst);
        println!(
            "  [producer] deleter ran: dropping the {} pixels",
            self.pixels.len()
        );
    }
}

/// What a consumer (a C library, numpy through a capsule, ...) does with a raw pointer.
fn consume(raw: *mut DLManagedTensorVersioned) -> Result<f32, dlpack_rs::safe::Error> {
    // SAFETY: `raw` comes straight from an export and nobody else owns it; from here on
    // `tensor` calls its deleter exactly once, when it is dropped.
    let tensor = unsafe { ManagedTensorVersioned::from_raw(raw)? };
    println!("  [consumer] version  = {}", tensor.version());
    println!("  [consumer] shape    = {:?}", tensor.shape());
    println!("  [consumer] strides  = {:?}", tensor.strides());
    println!("  [consumer] dtype    = {:?}", tensor.dtype());
    println!("  [consumer] device   = {:?}", tensor.device());
    println!("  [consumer] nbytes   = {}", tensor.nbytes());
    println!("  [consumer] readonly = {}", tensor.is_read_only());
    let values = tensor.as_slice::<f32>()?;
    println!("  [consumer] data     = {values:?} (read in place, no copy)");
    let sum = values.iter().sum();
    println!("  [consumer] done, dropping the tensor");
    Ok(sum)
}

fn main() -> Result<(), dlpack_rs::safe::Error> {
    println!("1. Safe export of a Vec<f32> (no unsafe, no raw pointer on the producer side)");
    let pixels = vec![0.0f32, 0.5, 1.0, 1.5, 2.0, 2.5];
    let first = pixels.as_ptr();
    let tensor = Export::new(pixels).shape(&[2, 3]).versioned()?;
    let view = tensor.as_slice::<f32>()?;
    println!(
        "  [producer] exported {:?} {:?}, data at {:p} (the Vec's own buffer: {})",
        tensor.shape(),
        tensor.dtype(),
        view.as_ptr(),
        view.as_ptr() == first
    );
    let sum = consume(tensor.into_raw())?;
    println!("  sum = {sum}");

    println!();
    println!("2. pack_versioned with a keepalive that counts its drops");
    let mut image = Image {
        pixels: vec![1.0, 2.0, 3.0, 4.0],
    };
    let info = TensorInfo::contiguous(
        image.pixels.as_mut_ptr() as *mut c_void,
        cpu_device(),
        dtype_f32(),
        vec![2, 2],
    );
    let raw = pack_versioned(image, info, DLPACK_FLAG_BITMASK_READ_ONLY);
    println!(
        "  [producer] packed; keepalive drops so far: {}",
        DROPS.load(Ordering::SeqCst)
    );
    let sum = consume(raw)?;
    println!("  sum = {sum}");

    let drops = DROPS.load(Ordering::SeqCst);
    println!();
    println!("deleter ran {drops} time(s) for the one packed keepalive");
    assert_eq!(drops, 1, "the deleter must run exactly once");
    println!("demo: OK");
    Ok(())
}
