// `no_pymethods` (0.3) has no meaning any more: the derive adds Python methods only when
// asked. The error says what to do instead.
use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
#[dlpack(no_pymethods)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

fn main() {}
