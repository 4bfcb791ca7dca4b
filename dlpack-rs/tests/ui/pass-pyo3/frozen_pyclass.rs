// The one-line case: a frozen pyclass gets `__dlpack__` and `__dlpack_device__`.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    shape: [usize; 3],
}

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
#[dlpack(read_only)]
struct Frozen(#[dlpack(data)] Vec<f32>);

// Generic structs get the trait impl only (pyo3 classes cannot be generic).
#[derive(IntoDLPack)]
struct Tensor<T> {
    #[dlpack(data)]
    data: Vec<T>,
}

fn main() {
    let _ = (Image::__dlpack__, Image::__dlpack_device__, Frozen::__dlpack__);
    let t = Tensor { data: vec![1u8] };
    assert_eq!(t.tensor_info().shape, vec![1]);
}
