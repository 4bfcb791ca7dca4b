use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(data)]
    alpha: Vec<u8>,
}

fn main() {}
