use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
enum Image {
    Gray(Vec<u8>),
    Rgb(Vec<u8>),
}

fn main() {}
