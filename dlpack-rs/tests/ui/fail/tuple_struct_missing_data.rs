use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Pair(Vec<u8>, #[dlpack(shape)] Vec<usize>);

fn main() {}
