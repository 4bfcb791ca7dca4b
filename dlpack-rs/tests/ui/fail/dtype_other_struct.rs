use dlpack_rs::IntoDLPack;

struct MyDtype;

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(dtype)]
    dtype: MyDtype,
}

fn main() {}
