// Soundness reproducer: a safe `impl IntoDLPack` could describe memory it does not own (here a
// freed buffer) and safe code would read it back. The trait is `unsafe` to implement.
use dlpack_rs::safe::{cpu_device, dtype_f32, TensorInfo};
use dlpack_rs::IntoDLPack;

struct Liar;

impl IntoDLPack for Liar {
    fn tensor_info(&self) -> TensorInfo {
        let freed = vec![1.0f32; 4];
        TensorInfo::contiguous(freed.as_ptr() as *mut _, cpu_device(), dtype_f32(), vec![4])
    }
}

fn main() {
    let t = Liar.into_managed_tensor_versioned().unwrap();
    let _ = t.as_slice::<f32>().unwrap()[0];
}
