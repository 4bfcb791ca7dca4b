//! A keepalive that owns a float buffer and counts its drops (each drop is one call of the
//! export's deleter), shared by the ownership and accessor tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dlpack_rs::safe::{cpu_device, dtype_f32, TensorInfo};

pub struct Counted {
    _data: Vec<f32>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// A keepalive of `n` floats `0, 1, 2, ...`, the compact 1-D metadata of its buffer, and its
/// drop counter.
pub fn counted(n: usize) -> (Counted, TensorInfo, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    let mut data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let info = TensorInfo::contiguous(
        data.as_mut_ptr().cast(),
        cpu_device(),
        dtype_f32(),
        vec![n as i64],
    );
    let keep = Counted {
        _data: data,
        drops: drops.clone(),
    };
    (keep, info, drops)
}
