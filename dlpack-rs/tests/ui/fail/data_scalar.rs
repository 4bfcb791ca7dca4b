use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Scalar {
    #[dlpack(data)]
    value: f32,
}

fn main() {}
