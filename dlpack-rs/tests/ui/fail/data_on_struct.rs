use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
#[dlpack(data)]
struct Image {
    pixels: Vec<u8>,
}

fn main() {}
