use dlpack_rs::IntoDLPack;

const GPU: (i32, i32) = (2, 0);

#[derive(IntoDLPack)]
#[dlpack(device = GPU)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

fn main() {}
