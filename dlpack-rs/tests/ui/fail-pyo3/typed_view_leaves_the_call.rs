// Soundness: a typed argument holds its object for the call only, released with a plain decref
// on the attached thread that made it (the `'py` lifetime proves it). It cannot move to another
// thread, nor into a closure that runs detached, nor be kept past the call.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::pyo3_glue::{CContig, Dims, TensorView, TensorViewMut, ANY};

#[pyfunction]
#[pyo3(crate = "dlpack_rs::pyo3")]
fn on_another_thread(x: TensorView<'_, f32, Dims<ANY>, CContig>) -> f32 {
    std::thread::spawn(move || x[0]).join().unwrap()
}

#[pyfunction]
#[pyo3(crate = "dlpack_rs::pyo3")]
fn dropped_detached(py: Python<'_>, x: TensorViewMut<'_, f32, Dims<ANY>, CContig>) {
    py.detach(move || drop(x));
}

static KEPT: std::sync::Mutex<Vec<TensorView<'static, f32>>> = std::sync::Mutex::new(Vec::new());

#[pyfunction]
#[pyo3(crate = "dlpack_rs::pyo3")]
fn kept(x: TensorView<'_, f32>) {
    KEPT.lock().unwrap().push(x);
}

fn main() {}
