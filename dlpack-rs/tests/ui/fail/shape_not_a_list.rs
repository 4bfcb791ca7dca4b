use dlpack_rs::IntoDLPack;

struct Dims {
    rows: usize,
    cols: usize,
}

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    shape: Dims,
}

fn main() {}
