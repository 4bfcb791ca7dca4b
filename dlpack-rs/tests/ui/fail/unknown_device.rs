use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
#[dlpack(device = "cdua:0")]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

fn main() {}
