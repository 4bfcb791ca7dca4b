use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    #[dlpack(data)]
    pixels: Vec<u8>,
}

fn main() {}
