use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
union Bits {
    a: u32,
    b: f32,
}

fn main() {}
