//! Where a typed argument's elements come from ([`Source`]), and the refusals all share.

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;

use alloc::borrow::Cow;

use crate::ffi::{DLDataType, DLDevice};
use crate::pyo3_glue::export::exchange_export::DLPackTensor;
use crate::pyo3_glue::import::exchange_import::Lent;
use crate::pyo3_glue::import::{ImportOptions, PyTensor};
use crate::pyo3_glue::runtime::errors::dtype_message;
use crate::safe::{AnyManaged, Described, Error};

/// Where a typed argument's elements come from, and the object they came from (held for the
/// call: `'py` keeps the reference on an attached thread, so its release is a plain decref).
pub(in crate::pyo3_glue) struct Source<'py> {
    // Dropped before the object (fields drop in order).
    origin: Origin,
    pub(in crate::pyo3_glue) object: Bound<'py, PyAny>,
}

enum Origin {
    Owned(PyTensor),
    /// One of our own frozen `dlpack_rs.Tensor` objects (the held object), viewed in place.
    Ours(*const AnyManaged),
    /// A non-owning view (a table's, or a numpy struct's), valid while the object lives.
    Borrowed(Described),
}

impl<'py> Source<'py> {
    /// Imports `obj` for a typed argument by the cheapest route its type allows.
    pub(in crate::pyo3_glue) fn import(obj: &Bound<'py, PyAny>, exclusive: bool) -> PyResult<Self> {
        if crate::pyo3_glue::numpy::direct::may_be_array(obj) {
            if let Some(source) = Self::numpy_view(obj, exclusive)? {
                return Ok(source);
            }
        }
        if !exclusive {
            match crate::pyo3_glue::import::exchange_import::borrowed_view(obj)? {
                Lent::Ours => {
                    // A class body may copy our capsule: view only a real `dlpack_rs.Tensor`.
                    if let Ok(ours) = obj.cast::<DLPackTensor>() {
                        crate::pyo3_glue::runtime::shared_registry::join(obj.py())?;
                        return Ok(Source::of(obj, Origin::Ours(ours.get().tensor())));
                    }
                }
                Lent::View(view) => {
                    crate::pyo3_glue::runtime::shared_registry::join(obj.py())?;
                    // A table's non-owning tensor has no flags: shared views only.
                    return Ok(Source::of(obj, Origin::Borrowed(view)));
                }
                Lent::Nothing => {}
            }
        }
        let tensor = ImportOptions::new().import(obj)?;
        if exclusive && tensor.is_read_only() {
            return Err(read_only_error(tensor.is_versioned()));
        }
        Ok(Source::of(obj, Origin::Owned(tensor)))
    }

    fn of(obj: &Bound<'py, PyAny>, origin: Origin) -> Self {
        Source {
            origin,
            object: obj.clone(),
        }
    }

    /// [`Source::import`] of a numpy array the direct read takes (`None` otherwise).
    #[inline(never)]
    fn numpy_view(obj: &Bound<'py, PyAny>, exclusive: bool) -> PyResult<Option<Self>> {
        // Hold the array before reading its struct: numpy's `resize` refuses to reallocate an
        // array another reference holds, and Python code may run before the view is handed out.
        let object = obj.clone();
        let Some((mut view, writable)) = crate::pyo3_glue::numpy::direct::view(obj)? else {
            return Ok(None);
        };
        if !writable && exclusive {
            // Refused early; asked again below, as Python code may clear the flag meanwhile.
            // numpy >= 2.1 (the direct read's condition) exports versioned tensors.
            return Err(read_only_error(true));
        }
        crate::pyo3_glue::runtime::shared_registry::join(obj.py())?;
        crate::pyo3_glue::numpy::borrow::coordinate_view(obj, &mut view)?;
        // Joining and rust-numpy's views may have run Python code (clearing `writeable`): ask
        // numpy again; nothing from here to the argument's borrow runs Python code.
        if crate::pyo3_glue::numpy::direct::writeable(obj) {
            // SAFETY: numpy flags the array `WRITEABLE` now: its export would not be READ_ONLY.
            unsafe { view.allow_writes() };
        } else if exclusive {
            return Err(read_only_error(true));
        }
        Ok(Some(Source {
            origin: Origin::Borrowed(view),
            object,
        }))
    }

    /// The owner of an `Owned` or `Ours` source, or the view of a borrowed one.
    fn owner(&self) -> Result<&AnyManaged, &Described> {
        match &self.origin {
            Origin::Borrowed(view) => Err(view),
            Origin::Owned(tensor) => Ok(tensor),
            // SAFETY: the tensor of a live frozen `DLPackTensor` (held by `object`), never moved.
            Origin::Ours(tensor) => Ok(unsafe { &**tensor }),
        }
    }

    /// Shape, strides as given, dtype and device.
    pub(in crate::pyo3_glue) fn meta(&self) -> (&[i64], Option<&[i64]>, DLDataType, DLDevice) {
        match self.owner() {
            Ok(t) => (t.shape(), t.raw_strides(), t.dtype(), t.device()),
            Err(view) => (
                view.shape(),
                view.raw_strides(),
                view.dtype(),
                view.device(),
            ),
        }
    }

    /// What the view checks read of the tensor; an exclusive borrow of one of ours, or of a view
    /// not allowed writes, is refused (read-only).
    #[inline(always)]
    pub(in crate::pyo3_glue) fn parts(
        &self,
        exclusive: bool,
    ) -> Result<crate::safe::import::views::Parts<'_>, Error> {
        match (self.owner(), &self.origin) {
            (Ok(_), Origin::Ours(_)) if exclusive => Err(Error::ReadOnly),
            (Ok(t), _) => Ok(t.parts()),
            (Err(view), _) => view.parts(exclusive),
        }
    }

    pub(in crate::pyo3_glue) fn shape(&self) -> &[i64] {
        self.meta().0
    }

    pub(in crate::pyo3_glue) fn dtype(&self) -> DLDataType {
        self.meta().2
    }

    pub(in crate::pyo3_glue) fn device(&self) -> DLDevice {
        self.meta().3
    }

    pub(in crate::pyo3_glue) fn strides(&self) -> Cow<'_, [i64]> {
        let (shape, strides, _, _) = self.meta();
        match strides {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(crate::safe::compact_strides(shape)),
        }
    }
}

/// The `BufferError` for a writable argument given a read-only tensor, saying why.
fn read_only_error(versioned: bool) -> PyErr {
    if versioned {
        PyBufferError::new_err(
            "expected a writable tensor, got a read-only one: its producer exported it \
             READ_ONLY (a numpy array whose flags.writeable is False, from np.frombuffer, a \
             broadcast or a read-only memory map, say): pass a writable copy (x.copy())",
        )
    } else {
        PyBufferError::new_err(
            "expected a writable tensor, got a read-only one: it came as a legacy (unversioned) \
             DLPack capsule, which cannot say whether it may be written: ask its producer for \
             DLPack >= 1.0 (__dlpack__(max_version=(1, 0))), or pass a copy",
        )
    }
}

/// The `TypeError` for a tensor of `got` where one of `wanted` was expected, with a hint.
pub(in crate::pyo3_glue) fn dtype_error(wanted: &[DLDataType], got: DLDataType) -> PyErr {
    PyTypeError::new_err(dtype_message(wanted, got))
}
