// pyo3 classes cannot be generic: `#[dlpack(pyclass)]` on a generic struct is refused at the key.
use dlpack_rs::safe::Element;
use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct Tensor<T: Element> {
    #[dlpack(data)]
    data: Vec<T>,
}

fn main() {}
