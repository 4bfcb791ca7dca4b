use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Indices {
    #[dlpack(data)]
    values: Vec<usize>,
}

fn main() {}
