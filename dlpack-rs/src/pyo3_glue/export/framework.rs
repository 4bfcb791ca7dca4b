//! Handing a Rust tensor to a framework as its own type: [`Returned`] and [`Framework`].

use pyo3::exceptions::{PyBufferError, PySystemError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

use crate::ffi::DLDeviceType;
use crate::pyo3_glue::runtime::cpython::imported_module;
use crate::pyo3_glue::runtime::errors::pending_error;
use crate::pyo3_glue::runtime::exchange_lookup::type_table;
use crate::pyo3_glue::DLPackTensor;
use crate::safe::ManagedTensorVersioned;

/// `ReturnTo::hand_over` to the framework whose tensor type is `ty` (none: `dlpack_rs.Tensor`).
/// A tensor it may not represent skips the table, which would steal (and may leak) it.
fn hand_to_type<'py>(
    py: Python<'py>,
    ty: Option<&Bound<'py, PyType>>,
    tensor: ManagedTensorVersioned,
) -> PyResult<Bound<'py, PyAny>> {
    crate::pyo3_glue::runtime::shared_registry::join(py)?;
    let representable = tensor.dtype().lanes == 1
        && crate::safe::element_bits(tensor.dtype()) % 8 == 0
        && [DLDeviceType::CPU, DLDeviceType::CUDA, DLDeviceType::ROCM]
            .contains(&tensor.device().device_type);
    let table = ty
        .and_then(type_table)
        .and_then(|t| t.managed_tensor_to_py_object_no_sync);
    let to_py = table.filter(|_| representable);
    let from_dlpack = match (to_py, ty) {
        (None, Some(ty)) => importer(ty)?,
        _ => None,
    };
    if tensor.is_read_only() && (to_py.is_some() || from_dlpack.is_some()) {
        // torch's table ignores READ_ONLY: the framework could write memory that must not be.
        return Err(PyBufferError::new_err(
            "Returned: the tensor is read-only, and a framework's exchange table need not \
             honour the flag; hand over a copy (`tensor.copy()`)",
        ));
    }
    if let Some(to_py) = to_py {
        let raw = tensor.into_raw();
        let mut out: *mut core::ffi::c_void = core::ptr::null_mut();
        // SAFETY: `to_py` is from the static table found in `ty`'s MRO, called as dlpack.h says:
        // attached (we hold `py`), with an owned tensor (stolen, on failure too), a valid out.
        let rc = unsafe { to_py(raw, &mut out) };
        if rc != 0 {
            return Err(pending_error(py, "managed_tensor_to_py_object_no_sync"));
        }
        if out.is_null() {
            return Err(PySystemError::new_err(
                "managed_tensor_to_py_object_no_sync returned NULL",
            ));
        }
        // SAFETY: on success the table hands back a new (owned) reference to a Python object.
        return Ok(unsafe { Bound::from_owned_ptr(py, out.cast()) });
    }
    match from_dlpack {
        Some(from_dlpack) => {
            let dtype = tensor.dtype();
            from_dlpack
                .call1((DLPackTensor::new(tensor),))
                .map_err(|err| numpy_dtype_hint(&from_dlpack, dtype, err))
        }
        None => Ok(Bound::new(py, DLPackTensor::new(tensor))?.into_any()),
    }
}

/// The `from_dlpack` of `ty`'s package (`jax.numpy`'s for jax), if imported.
fn importer<'py>(ty: &Bound<'py, PyType>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = ty.py();
    let module: String = ty
        .getattr(pyo3::intern!(py, "__module__"))
        .and_then(|m| m.extract())
        .unwrap_or_default();
    let package = match module.split('.').next().unwrap_or_default() {
        "jax" | "jaxlib" => py.import("jax.numpy")?.into_any(),
        "" | "builtins" => return Ok(None),
        // Imported already: its type exists.
        other => match imported_module(py, &PyString::new(py, other))? {
            Some(package) => package,
            None => return Ok(None),
        },
    };
    Ok(package.getattr(pyo3::intern!(py, "from_dlpack")).ok())
}

/// numpy's bare error for a dtype it lacks, as a `TypeError` naming the fixes.
fn numpy_dtype_hint(
    from_dlpack: &Bound<'_, PyAny>,
    dtype: crate::ffi::DLDataType,
    err: PyErr,
) -> PyErr {
    let py = from_dlpack.py();
    let is_numpy = from_dlpack
        .getattr("__module__")
        .and_then(|m| m.extract::<String>())
        .is_ok_and(|m| m == "numpy" || m.starts_with("numpy."));
    if !is_numpy || dtype.numpy_has() {
        return err;
    }
    let hint = PyTypeError::new_err(format!(
        "numpy cannot import {} over DLPack (numpy 2.4 takes int, uint, float, complex and bool \
         only; numpy 2.5 also bfloat16 and FP8 once ml_dtypes is installed): hand the tensor to \
         torch.from_dlpack or jax.numpy.from_dlpack instead, or convert it to a dtype numpy has \
         first",
        dtype.name()
    ));
    hint.set_cause(py, Some(err));
    hint
}

/// The framework a tensor argument came from, to hand a result back with [`Returned::like`].
#[derive(Debug)]
pub struct Framework {
    ty: crate::pyo3_glue::PyKeepalive,
}

impl Framework {
    /// The framework of `obj`'s type.
    pub fn of(obj: &Bound<'_, PyAny>) -> Framework {
        Framework::of_type(&obj.get_type())
    }

    /// The framework whose tensor type is `ty` (`numpy.ndarray`, `torch.Tensor`, `jax.Array`).
    pub fn of_type(ty: &Bound<'_, PyType>) -> Framework {
        Framework {
            ty: crate::pyo3_glue::PyKeepalive::new(ty.py(), ty.clone().into_any().unbind()),
        }
    }

    /// Another handle on the same framework.
    pub fn clone_ref(&self, py: Python<'_>) -> Framework {
        Framework {
            ty: crate::pyo3_glue::PyKeepalive::new(
                py,
                self.ty
                    .object()
                    .map(|ty| ty.clone_ref(py))
                    .unwrap_or_else(|| py.None()),
            ),
        }
    }
}

mod sealed {
    use super::*;

    /// Where a [`Returned`] tensor goes: [`Numpy`], [`Torch`], [`Jax`] or [`Framework`] (sealed).
    pub trait ReturnTo {
        /// The result's type in generated stubs (feature `inspect`).
        #[cfg(feature = "inspect")]
        const TYPE_HINT: pyo3::inspect::PyStaticExpr =
            crate::pyo3_glue::runtime::type_hints::DLPACK_ARRAY;

        /// Hands `tensor` over: by the type's table, its package's `from_dlpack`, or as is.
        fn hand_over<'py>(
            &self,
            py: Python<'py>,
            tensor: ManagedTensorVersioned,
        ) -> PyResult<Bound<'py, PyAny>>;
    }
}
use sealed::ReturnTo;

impl ReturnTo for Framework {
    fn hand_over<'py>(
        &self,
        py: Python<'py>,
        tensor: ManagedTensorVersioned,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ty = self.ty.object().map(|ty| ty.bind(py));
        hand_to_type(py, ty.and_then(|ty| ty.cast::<PyType>().ok()), tensor)
    }
}

macro_rules! fixed_frameworks {
    ($($(#[$doc:meta])* $name:ident => $module:literal . $attr:literal;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl ReturnTo for $name {
            #[cfg(feature = "inspect")]
            const TYPE_HINT: pyo3::inspect::PyStaticExpr =
                pyo3::type_hint_identifier!($module, $attr);

            fn hand_over<'py>(
                &self,
                py: Python<'py>,
                tensor: ManagedTensorVersioned,
            ) -> PyResult<Bound<'py, PyAny>> {
                static TYPE: pyo3::sync::PyOnceLock<Py<PyType>> = pyo3::sync::PyOnceLock::new();
                let ty = crate::pyo3_glue::runtime::once::get_or_try_init(&TYPE, py, || -> PyResult<_> {
                    Ok(py.import($module)?.getattr($attr)?.cast_into::<PyType>()?.unbind())
                })?;
                hand_to_type(py, Some(ty.bind(py)), tensor)
            }
        }
    )*};
}

fixed_frameworks! {
    /// numpy: a returned tensor becomes a `numpy.ndarray` (`numpy.from_dlpack`).
    Numpy => "numpy"."ndarray";
    /// torch: a returned tensor becomes a `torch.Tensor` (torch's exchange table, no capsule).
    Torch => "torch"."Tensor";
    /// jax: a returned tensor becomes a `jax.Array` (zero-copy for 64-byte aligned data).
    Jax => "jax"."Array";
}

/// A tensor a `#[pyfunction]` returns, handed over as a tensor of the framework its type names.
///
/// `Returned<Framework>` goes to an argument's framework ([`Returned::like`]). The tensor must be
/// writable, and device work producing it complete on return (no stream is synchronised).
///
/// ```
/// use dlpack_rs::pyo3_glue::{CContig, Framework, Dims, Returned, TensorView, Torch, ANY};
/// use dlpack_rs::safe::Export;
/// use pyo3::prelude::*;
///
/// #[pyfunction]
/// fn squares(x: TensorView<'_, f32>) -> PyResult<Returned<Torch>> {
///     let out: Vec<f32> = x.view().iter().map(|v| v * v).collect();
///     Ok(Returned::new(Export::new(out).shape(x.shape()).versioned()?))
/// }
///
/// #[pyfunction]
/// fn doubled(py: Python<'_>, obj: Bound<'_, PyAny>) -> PyResult<Returned<Framework>> {
///     let x: TensorView<'_, f64, Dims<ANY>, CContig> = obj.extract()?;
///     let out: Vec<f64> = x.iter().map(|v| v * 2.0).collect();
///     let tensor = Export::new(out).shape(x.shape()).versioned()?;
///     Ok(Returned::like(py, &Framework::of(&obj), tensor))
/// }
/// # fn main() {}
/// ```
#[must_use = "a Returned value hands its tensor over only when returned to Python"]
#[derive(Debug)]
pub struct Returned<F: ReturnTo> {
    tensor: ManagedTensorVersioned,
    to: F,
}

impl<F: ReturnTo + Default> Returned<F> {
    /// Wraps `tensor` to hand it to the framework `F` names.
    pub fn new(tensor: ManagedTensorVersioned) -> Self {
        Returned {
            tensor,
            to: F::default(),
        }
    }

    /// Exports `value` (an ndarray `Array`, a derived struct, ...) for the framework `F` names.
    pub fn from_value<V>(value: V) -> Result<Self, crate::safe::Error>
    where
        V: crate::pyo3_glue::IntoDLPack + Send + 'static,
    {
        Ok(Returned::new(value.into_managed_tensor_versioned()?))
    }
}

impl Returned<Framework> {
    /// Wraps `tensor` to hand it to the framework `framework` stands for (an argument's).
    pub fn like(py: Python<'_>, framework: &Framework, tensor: ManagedTensorVersioned) -> Self {
        Returned {
            tensor,
            to: framework.clone_ref(py),
        }
    }
}

impl<'py, F: ReturnTo> IntoPyObject<'py> for Returned<F> {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    #[cfg(feature = "inspect")]
    const OUTPUT_TYPE: pyo3::inspect::PyStaticExpr = F::TYPE_HINT;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to.hand_over(py, self.tensor)
    }
}
