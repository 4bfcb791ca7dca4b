use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shpae)]
    shape: Vec<i64>,
}

fn main() {}
