//! The `__dlpack__` method of derived classes: a method descriptor reading its keywords itself.

use core::ffi::CStr;
use core::marker::PhantomData;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::Borrowed;

use crate::pyo3_glue::export::class_export::{class_capsule, RoutedClass};
use crate::pyo3_glue::export::protocol::DLPackArgs;
use crate::pyo3_glue::runtime::cpython::attached_entry;
use crate::IntoDLPack;

const NAME: &CStr = c"__dlpack__";
const DOC: &CStr =
    c"__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)
--

Exports the data as a DLPack capsule (the array API's __dlpack__ protocol).";

#[repr(transparent)]
struct StaticDef(ffi::PyMethodDef);

// SAFETY: immutable, and every pointer in it is to static, immutable data or to code.
unsafe impl Sync for StaticDef {}

struct Defs<T>(PhantomData<T>);

impl<T: IntoDLPack + RoutedClass> Defs<T> {
    const DEF: StaticDef = StaticDef(ffi::PyMethodDef {
        ml_name: NAME.as_ptr(),
        #[cfg(not(feature = "abi3"))]
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: fastcall::<T>,
        },
        #[cfg(feature = "abi3")]
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionWithKeywords: varargs::<T>,
        },
        #[cfg(not(feature = "abi3"))]
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        #[cfg(feature = "abi3")]
        ml_flags: ffi::METH_VARARGS | ffi::METH_KEYWORDS,
        ml_doc: DOC.as_ptr(),
    });
}

/// The `__dlpack__` method descriptor of class `T`, the derive's class attribute.
#[doc(hidden)]
pub fn dlpack_method<T: IntoDLPack + RoutedClass>(
    py: Python<'_>,
) -> PyResult<MethodDescriptor<'_>> {
    let def: &'static StaticDef = &Defs::<T>::DEF;
    let ty = T::type_object(py);
    // SAFETY: `def` is a static method definition whose entry point matches its flags; CPython
    // keeps the pointer and never writes through it. The type is `T`'s, alive while we hold `py`.
    unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyDescr_NewMethod(ty.as_type_ptr(), (&raw const def.0).cast_mut()),
        )
    }
    .map(MethodDescriptor)
}

/// The `__dlpack__` method descriptor; typed as the array API's `__dlpack__` in stubs.
#[doc(hidden)]
pub struct MethodDescriptor<'py>(Bound<'py, PyAny>);

impl<'py> IntoPyObject<'py> for MethodDescriptor<'py> {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = core::convert::Infallible;

    #[cfg(feature = "inspect")]
    const OUTPUT_TYPE: pyo3::inspect::PyStaticExpr =
        crate::pyo3_glue::runtime::type_hints::DLPACK_METHOD;

    fn into_pyobject(self, _py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(self.0)
    }
}

const KEYWORDS: [&str; 4] = ["stream", "max_version", "dl_device", "copy"];

type Values<'py> = [Option<Bound<'py, PyAny>>; 4];

/// Puts `value` in the slot of keyword `name`; `TypeError` for an unknown or repeated one.
fn set<'py>(
    values: &mut Values<'py>,
    name: Borrowed<'_, 'py, PyAny>,
    value: Bound<'py, PyAny>,
) -> PyResult<()> {
    let py = name.py();
    static NAMES: pyo3::sync::PyOnceLock<[Py<PyString>; 4]> = pyo3::sync::PyOnceLock::new();
    let names = crate::pyo3_glue::runtime::once::get_or_init(&NAMES, py, || {
        KEYWORDS.map(|n| PyString::intern(py, n).unbind())
    });
    let i = match names.iter().position(|n| n.as_ptr() == name.as_ptr()) {
        Some(i) => i,
        None => {
            let name = name.cast::<PyString>()?;
            let text = name.to_cow()?;
            KEYWORDS.iter().position(|k| *k == text).ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "__dlpack__() got an unexpected keyword argument '{text}'"
                ))
            })?
        }
    };
    if values[i].replace(value).is_some() {
        return Err(PyTypeError::new_err(format!(
            "__dlpack__() got multiple values for argument '{}'",
            KEYWORDS[i]
        )));
    }
    Ok(())
}

fn positional_error(given: isize) -> PyErr {
    PyTypeError::new_err(format!(
        "__dlpack__() takes 0 positional arguments but {given} were given (its arguments are \
         keyword-only)"
    ))
}

/// The export, once the arguments are read.
fn export<'py, T: IntoDLPack + RoutedClass>(
    py: Python<'py>,
    slf: *mut ffi::PyObject,
    values: Values<'py>,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: CPython passes the live object the method was looked up on.
    let slf = unsafe { Borrowed::from_ptr(py, slf) };
    let slf = slf.cast::<T>()?;
    let [stream, max_version, dl_device, copy] = values;
    let args = DLPackArgs::parse(stream, max_version, dl_device, copy)?;
    class_capsule(&slf, &args).map(Bound::into_ptr)
}

const PANIC: &str = "a Rust panic in __dlpack__";

/// `METH_FASTCALL | METH_KEYWORDS`: `nargs` positional values, then one per name in `kwnames`.
#[cfg(not(feature = "abi3"))]
unsafe extern "C" fn fastcall<T: IntoDLPack + RoutedClass>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls methods attached, with the vectorcall arguments described above.
    unsafe {
        attached_entry(core::ptr::null_mut(), PANIC, |py| {
            // The vectorcall flag bit may be set in `nargs`.
            let positional = ffi::PyVectorcall_NARGS(nargs as usize);
            if positional != 0 {
                return Err(positional_error(positional));
            }
            let mut values: Values<'_> = [None, None, None, None];
            if !kwnames.is_null() {
                for k in 0..ffi::PyTuple_GET_SIZE(kwnames) {
                    let name = Borrowed::from_ptr(py, ffi::PyTuple_GET_ITEM(kwnames, k));
                    let value = Borrowed::from_ptr(py, *args.add(k as usize));
                    set(&mut values, name, value.to_owned())?;
                }
            }
            export::<T>(py, slf, values)
        })
    }
}

/// `METH_VARARGS | METH_KEYWORDS` (abi3): a tuple and a dict (or NULL).
#[cfg(feature = "abi3")]
unsafe extern "C" fn varargs<T: IntoDLPack + RoutedClass>(
    slf: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls methods attached, with a tuple and a dict or NULL.
    unsafe {
        attached_entry(core::ptr::null_mut(), PANIC, |py| {
            let args = Borrowed::from_ptr(py, args).cast::<pyo3::types::PyTuple>()?;
            if !args.is_empty() {
                return Err(positional_error(args.len() as isize));
            }
            let mut values: Values<'_> = [None, None, None, None];
            if !kwargs.is_null() {
                let kwargs = Borrowed::from_ptr(py, kwargs).cast::<pyo3::types::PyDict>()?;
                for (name, value) in kwargs.iter() {
                    set(&mut values, name.as_borrowed(), value)?;
                }
            }
            export::<T>(py, slf, values)
        })
    }
}

/// A capsule returned to Python, typed `typing_extensions.CapsuleType` in stubs.
#[doc(hidden)]
pub struct CapsuleObject<'py>(pub Bound<'py, pyo3::types::PyCapsule>);

impl<'py> IntoPyObject<'py> for CapsuleObject<'py> {
    type Target = pyo3::types::PyCapsule;
    type Output = Bound<'py, pyo3::types::PyCapsule>;
    type Error = core::convert::Infallible;

    #[cfg(feature = "inspect")]
    const OUTPUT_TYPE: pyo3::inspect::PyStaticExpr =
        pyo3::type_hint_identifier!("typing_extensions", "CapsuleType");

    fn into_pyobject(self, _py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(self.0)
    }
}
