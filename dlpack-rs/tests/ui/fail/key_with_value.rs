use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data = "pixels")]
    pixels: Vec<u8>,
}

fn main() {}
