use dlpack_rs::ffi::DLDevice;
use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
#[dlpack(device = "cuda:0")]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(device)]
    device: DLDevice,
}

fn main() {}
