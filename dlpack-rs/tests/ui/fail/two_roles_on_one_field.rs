use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data, shape)]
    pixels: Vec<u8>,
}

fn main() {}
