use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Image {
    pixels: Vec<u8>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

fn main() {}
