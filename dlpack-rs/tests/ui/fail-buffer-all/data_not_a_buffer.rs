use std::collections::HashMap;

use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Table {
    #[dlpack(data)]
    values: HashMap<u32, f32>,
}

fn main() {}
