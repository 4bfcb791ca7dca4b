use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Small {
    #[dlpack(data)]
    values: [f32; 4],
}

fn main() {}
