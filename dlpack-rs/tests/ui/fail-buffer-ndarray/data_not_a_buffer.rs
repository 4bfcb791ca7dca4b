use std::collections::HashMap;

use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
#[dlpack(no_pymethods)]
struct Table {
    #[dlpack(data)]
    values: HashMap<u32, f32>,
}

fn main() {}
