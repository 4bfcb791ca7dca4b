//! The type hints generated stubs get (feature `inspect`): results name their framework's type;
//! arguments and `Returned<Framework>` name the protocols of `TYPING_STUB`, in the module
//! `DLPACK_RS_TYPING_MODULE` named at build time, or stay `_typeshed.Incomplete` without one.
#![cfg(feature = "inspect")]

use dlpack_rs::pyo3_glue::{
    AnyOf, Framework, Jax, Numpy, PyTensor, Returned, TensorView, TensorViewMut, Torch, TYPING_STUB,
};
use pyo3::{FromPyObject, IntoPyObject};

fn input<'py, T: for<'a> FromPyObject<'a, 'py>>() -> String {
    <T as FromPyObject<'_, 'py>>::INPUT_TYPE.to_string()
}

fn output<T: for<'py> IntoPyObject<'py>>() -> String {
    <T as IntoPyObject<'_>>::OUTPUT_TYPE.to_string()
}

fn protocol(name: &str) -> String {
    match option_env!("DLPACK_RS_TYPING_MODULE") {
        Some(module) => format!("{module}.{name}"),
        None => "_typeshed.Incomplete".to_string(),
    }
}

#[test]
fn results_name_their_framework() {
    assert_eq!(output::<Returned<Numpy>>(), "numpy.ndarray");
    assert_eq!(output::<Returned<Torch>>(), "torch.Tensor");
    assert_eq!(output::<Returned<Jax>>(), "jax.Array");
    assert_eq!(output::<Returned<Framework>>(), protocol("DLPackArray"));
}

#[test]
fn arguments_take_any_dlpack_producer() {
    let any = protocol("SupportsDLPack");
    assert_eq!(input::<TensorView<'_, f32>>(), any);
    assert_eq!(input::<TensorViewMut<'_, u8>>(), any);
    assert_eq!(input::<AnyOf<'_, (u8, f32)>>(), any);
    assert_eq!(input::<PyTensor>(), any);
}

#[test]
fn the_stub_defines_every_protocol_the_hints_name() {
    for class in ["SupportsDLPack", "DLPackArray", "DLPackMethod"] {
        assert!(
            TYPING_STUB.contains(&format!("class {class}(Protocol):")),
            "{class}"
        );
    }
}
