// `pyclass` (the derive adds the Python methods) and `no_pymethods` (you write them) together.
use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
#[dlpack(pyclass, no_pymethods)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

fn main() {}
