//! numpy imports in a process where nothing has looked up rust-numpy's borrow table yet (an
//! embedded interpreter, a debug build): the first look-up keeps the table it stores. Needs
//! numpy on `PYTHONPATH`; the test command's `python` step runs it with the suite's packages
//! (`--ignored`).
#![cfg(feature = "pyo3")]

use dlpack_rs::pyo3_glue::PyTensor;
use pyo3::prelude::*;

#[test]
#[ignore = "needs numpy: the python step runs it with PYTHONPATH set"]
fn the_first_numpy_import_keeps_the_table_it_finds() {
    Python::initialize();
    Python::attach(|py| -> PyResult<()> {
        let x = py.eval(c"__import__('numpy').arange(6.0).reshape(2, 3)", None, None)?;
        let t = PyTensor::from_pyany(py, &x)?;
        assert_eq!(*t.as_slice::<f64>()?, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        // A second import asks the table again (found now) and refuses a conflicting borrow.
        let mut u = PyTensor::from_pyany(py, &x)?;
        let view = t.as_slice::<f64>()?;
        assert!(u.as_mut_slice::<f64>().is_err());
        drop(view);
        Ok(())
    })
    .unwrap();
}
