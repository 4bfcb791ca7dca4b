use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
#[dlpack(read_only, read_only)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

fn main() {}
