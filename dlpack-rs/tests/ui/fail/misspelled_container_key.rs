use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
#[dlpack(readonly)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

fn main() {}
