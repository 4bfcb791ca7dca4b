use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Image {
    #[dlpack]
    pixels: Vec<u8>,
}

fn main() {}
