use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data, read_only)]
    pixels: Vec<u8>,
}

fn main() {}
