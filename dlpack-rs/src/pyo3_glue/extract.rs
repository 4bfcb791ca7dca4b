//! Typed, borrow-checked `#[pyfunction]` arguments: [`TensorRef`] (shared) and [`TensorMut`]
//! (exclusive) fix the element type, and optionally the number of dimensions, in the signature,
//! import from any DLPack producer, and hold their borrow from extraction until they drop.

use core::fmt;
use core::ops::{Deref, DerefMut};

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::Borrowed;

use alloc::borrow::Cow;

use super::errors::{dtype_message, tuple_of};
use super::exchange_import::Lent;
use super::import::{ImportOptions, PyTensor};
use super::keepalive::PyKeepalive;
use super::tensor::DLPackTensor;
use crate::ffi::{DLDataType, DLDevice};
use crate::safe::borrow::BorrowToken;
use crate::safe::{AnyBitPattern, AnyManaged, Described, Error};

/// The `NDIM` of [`TensorRef`] / [`TensorMut`] that accepts any number of dimensions.
pub const ANY_NDIM: usize = usize::MAX;

/// A read-only tensor argument of element type `T` (and `NDIM` dimensions, unless
/// [`ANY_NDIM`]), C-contiguous, from any DLPack producer; derefs to `[T]`.
///
/// Extraction imports the object through the routes [`PyTensor`] uses (the producer's exchange
/// table or its `__dlpack__`; one of this crate's own `dlpack_rs.Tensor` objects is viewed in
/// place, without a new import), checks the element type (`TypeError`
/// naming both dtypes the way Python users write them, `float32`), the number of dimensions
/// (`TypeError`) and the layout (`BufferError` saying how to make it contiguous), and takes a
/// shared borrow of the elements in the [borrow registry](crate::safe#the-borrow-registry), held until the
/// argument drops: while it lives no mutable view of the memory exists anywhere. (Writes by
/// Python or C code to memory it was given writable are outside that guarantee, as for every
/// view. `T` is an [`AnyBitPattern`] element, so such a write can never make Rust read an
/// invalid value: `bool`, whose bytes must stay 0 or 1, is viewed as `u8`.)
///
/// ```
/// use dlpack_rs::pyo3_glue::{TensorMut, TensorRef};
/// use pyo3::prelude::*;
///
/// /// `out[i] = a[i] + b[i]` for float32 matrices of one size.
/// #[pyfunction]
/// fn add(a: TensorRef<f32, 2>, b: TensorRef<f32, 2>, mut out: TensorMut<f32, 2>) -> PyResult<()> {
///     if a.shape() != b.shape() || a.shape() != out.shape() {
///         return Err(pyo3::exceptions::PyValueError::new_err("shapes differ"));
///     }
///     for ((o, x), y) in out.iter_mut().zip(a.iter()).zip(b.iter()) {
///         *o = x + y;
///     }
///     Ok(())
/// }
/// # fn main() {}
/// ```
pub struct TensorRef<T, const NDIM: usize = ANY_NDIM> {
    held: Held<T>,
}

/// A writable tensor argument of element type `T` (and `NDIM` dimensions, unless
/// [`ANY_NDIM`]), C-contiguous, from any DLPack producer; derefs mutably to `[T]`.
///
/// As [`TensorRef`], and the tensor must be writable (a read-only or legacy import raises
/// `BufferError`); the borrow is exclusive: extraction raises `BufferError` while any other view
/// of the memory exists (so `f(x, x)` with two `TensorMut` arguments is refused).
pub struct TensorMut<T, const NDIM: usize = ANY_NDIM> {
    held: Held<T>,
}

/// What both argument types hold: the tensor, the borrow of its elements, and the elements.
struct Held<T> {
    ptr: *mut T,
    len: usize,
    // Dropped before the source (fields drop in order).
    _borrow: BorrowToken,
    source: Source,
}

/// Where a typed argument's elements come from.
pub(super) enum Source {
    /// An import that owns its managed tensor (every producer; a `TensorMut` always).
    Owned(PyTensor),
    /// The tensor of one of this crate's own `dlpack_rs.Tensor` objects, viewed in place: the
    /// class is frozen, so the tensor it owns never changes or moves while the object, held
    /// here, lives; its views are the owner's own (with its rust-numpy coordination, for a numpy
    /// import it wraps, and whatever its read-only state).
    Ours {
        tensor: *const AnyManaged,
        _object: PyKeepalive,
    },
    /// A non-owning view through the producer's exchange table
    /// (`dltensor_from_py_object_no_sync`: no managed tensor, no deleter), valid while the
    /// object, held here, lives (as long as an owned import of it would be: torch's managed
    /// tensor holds the very tensor its object holds).
    Borrowed {
        view: Described,
        _object: PyKeepalive,
    },
}

impl Source {
    /// Imports `obj` for a typed argument: a shared argument that is one of this crate's
    /// `dlpack_rs.Tensor` objects is viewed in place, one of a type whose exchange table fills a
    /// non-owning `DLTensor` (torch) through that; everything else as [`PyTensor`]. An exclusive
    /// argument must be writable (`BufferError` saying why it is not).
    pub(super) fn import(obj: &Bound<'_, PyAny>, exclusive: bool) -> PyResult<Source> {
        if !exclusive {
            match super::exchange_import::borrowed_view(obj)? {
                Lent::Ours => {
                    // A class body may copy our table's capsule: only a real `dlpack_rs.Tensor`
                    // is viewed in place (the table itself refuses other objects).
                    if let Ok(ours) = obj.cast::<DLPackTensor>() {
                        super::shared_registry::join(obj.py())?;
                        return Ok(Source::Ours {
                            tensor: ours.get().tensor(),
                            _object: PyKeepalive::new(obj.py(), obj.clone().unbind()),
                        });
                    }
                }
                Lent::View(view) => {
                    super::shared_registry::join(obj.py())?;
                    let keep = PyKeepalive::new(obj.py(), obj.clone().unbind());
                    return Ok(Source::Borrowed {
                        view,
                        _object: keep,
                    });
                }
                Lent::Nothing => {}
            }
        }
        let tensor = ImportOptions::new().import(obj)?;
        if exclusive && tensor.is_read_only() {
            return Err(read_only_error(&tensor));
        }
        Ok(Source::Owned(tensor))
    }

    /// The owner of an `Owned` or `Ours` source (`None` for a borrowed one).
    fn owner(&self) -> Option<&AnyManaged> {
        match self {
            Source::Borrowed { .. } => None,
            Source::Owned(t) => Some(t),
            // SAFETY: the tensor inside a live frozen `DLPackTensor` (held by `_object`), which
            // the object never changes nor moves before it is deallocated.
            Source::Ours { tensor, .. } => Some(unsafe { &**tensor }),
        }
    }

    /// Shape, strides as given, dtype and device.
    fn meta(&self) -> (&[i64], Option<&[i64]>, DLDataType, DLDevice) {
        match (self.owner(), self) {
            (Some(t), _) => (t.shape(), t.raw_strides(), t.dtype(), t.device()),
            (None, Source::Borrowed { view, .. }) => (
                view.shape(),
                view.raw_strides(),
                view.dtype(),
                view.device(),
            ),
            (None, _) => (
                &[],
                None,
                crate::safe::dtype_u8(),
                crate::safe::cpu_device(),
            ),
        }
    }

    /// The checks and borrow of a contiguous slice of `T` (see `Managed::slice_parts`).
    fn slice_parts<T: AnyBitPattern>(
        &self,
        exclusive: bool,
    ) -> Result<(*mut T, usize, BorrowToken), Error> {
        match (self.owner(), self) {
            (Some(_), Source::Ours { .. }) if exclusive => Err(Error::ReadOnly),
            (Some(t), _) => t.slice_parts::<T>(exclusive),
            (None, Source::Borrowed { view, .. }) if !exclusive => {
                // SAFETY: the view's memory is its object's, which `self` keeps alive while the
                // pointer is used (the held argument owns both).
                unsafe { view.slice_parts::<T>(false) }
            }
            (None, _) => Err(Error::ReadOnly),
        }
    }

    /// The checks and borrow of a strided view of `T` (see `Managed::borrowed_layout`).
    #[cfg(feature = "ndarray")]
    pub(super) fn strided_parts<T: AnyBitPattern>(
        &self,
        exclusive: bool,
    ) -> Result<(crate::safe::ndarray::Normalized<T>, BorrowToken), Error> {
        match (self.owner(), self) {
            (Some(_), Source::Ours { .. }) if exclusive => Err(Error::ReadOnly),
            (Some(t), _) => t.borrowed_layout::<T>(exclusive),
            (None, Source::Borrowed { view, .. }) if !exclusive => {
                // SAFETY: as in `slice_parts`.
                unsafe { view.strided_parts::<T>() }
            }
            (None, _) => Err(Error::ReadOnly),
        }
    }

    /// The checks and borrow of a raw pointer to the elements on any device (see
    /// `safe::ndarray::raw_parts`): no host view is made.
    #[cfg(feature = "ndarray")]
    pub(super) fn raw_parts<T: crate::safe::Element>(
        &self,
        exclusive: bool,
    ) -> Result<(*mut T, BorrowToken), Error> {
        match (self.owner(), self) {
            (Some(_), Source::Ours { .. }) if exclusive => Err(Error::ReadOnly),
            (Some(t), _) => t.raw_parts::<T>(exclusive),
            (None, Source::Borrowed { view, .. }) if !exclusive => {
                crate::safe::ndarray::raw_parts::<T>(
                    view.data_ptr(),
                    view.shape(),
                    &self.strides(),
                    view.dtype(),
                    false,
                    Ok,
                )
            }
            (None, _) => Err(Error::ReadOnly),
        }
    }

    pub(super) fn shape(&self) -> &[i64] {
        self.meta().0
    }

    pub(super) fn dtype(&self) -> DLDataType {
        self.meta().2
    }

    pub(super) fn device(&self) -> DLDevice {
        self.meta().3
    }

    pub(super) fn strides(&self) -> Cow<'_, [i64]> {
        let (shape, strides, _, _) = self.meta();
        match strides {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(crate::safe::compact_strides(shape)),
        }
    }
}

// SAFETY: a `TensorRef` is an owner plus a shared view of its elements, like `(PyTensor, &[T])`.
unsafe impl<T: Sync, const N: usize> Send for TensorRef<T, N> {}
// SAFETY: as above.
unsafe impl<T: Sync, const N: usize> Sync for TensorRef<T, N> {}
// SAFETY: a `TensorMut` is an owner plus an exclusive view, like `(PyTensor, &mut [T])`.
unsafe impl<T: Send, const N: usize> Send for TensorMut<T, N> {}
// SAFETY: as above; `&TensorMut` gives only `&[T]`.
unsafe impl<T: Sync, const N: usize> Sync for TensorMut<T, N> {}

impl<T: AnyBitPattern> Held<T> {
    /// Imports `obj` and checks it against `T` and `NDIM`, with the messages a Python user can act
    /// on, then borrows its elements (exclusively or not).
    ///
    /// A shared argument that is one of this crate's `dlpack_rs.Tensor` objects is viewed in
    /// place, and one of a type whose exchange table fills a non-owning `DLTensor` (torch)
    /// through that (no managed tensor is made, no deleter runs); everything else, and every
    /// exclusive argument (a non-owning `DLTensor` carries no read-only flag), is imported as
    /// [`PyTensor`] is.
    fn import<const NDIM: usize>(obj: &Bound<'_, PyAny>, exclusive: bool) -> PyResult<Self> {
        let source = Source::import(obj, exclusive)?;
        check::<T, NDIM>(source.dtype(), source.shape())?;
        let parts = source.slice_parts::<T>(exclusive);
        Held::new(parts, source)
    }

    /// The held argument, or the error for a layout or borrow `slice_parts` refused.
    fn new(parts: Result<(*mut T, usize, BorrowToken), Error>, source: Source) -> PyResult<Self> {
        match parts {
            Ok((ptr, len, borrow)) => Ok(Held {
                ptr,
                len,
                _borrow: borrow,
                source,
            }),
            Err(Error::NotContiguous) => Err(PyBufferError::new_err(format!(
                "expected a C-contiguous tensor, got shape {} with strides {} (pass \
             np.ascontiguousarray(x) in numpy, x.contiguous() in torch)",
                tuple_of(source.shape()),
                tuple_of(&source.strides())
            ))),
            Err(e) => Err(e.into()),
        }
    }
}

/// The `BufferError` for a writable argument given a read-only tensor, saying why it is
/// read-only: a legacy capsule cannot say whether it may be written, a versioned producer
/// flagged it `READ_ONLY`.
pub(super) fn read_only_error(tensor: &PyTensor) -> PyErr {
    if tensor.is_versioned() {
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

/// The `TypeError` for a tensor of `got` where one of `wanted` was expected, in the names
/// Python users write (`float32`), with a conversion hint for the first wanted dtype.
pub(super) fn dtype_error(wanted: &[DLDataType], got: DLDataType) -> PyErr {
    PyTypeError::new_err(dtype_message(wanted, got))
}

/// Checks a tensor's dtype and number of dimensions against `T` and `NDIM` (`TypeError`).
fn check<T: AnyBitPattern, const NDIM: usize>(dtype: DLDataType, shape: &[i64]) -> PyResult<()> {
    if dtype != T::DTYPE {
        return Err(dtype_error(&[T::DTYPE], dtype));
    }
    if NDIM != ANY_NDIM && shape.len() != NDIM {
        return Err(PyTypeError::new_err(format!(
            "expected a {NDIM}-dimensional tensor, got {} dimension(s) (shape {})",
            shape.len(),
            tuple_of(shape)
        )));
    }
    Ok(())
}

impl<T> Held<T> {
    fn slice(&self) -> &[T] {
        // SAFETY: `slice_parts` checked dtype, layout, alignment and values, and registered the
        // borrow held in `_borrow`; the memory lives while `tensor` (dropped after the borrow)
        // owns it; the slice borrows `self`.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// # Safety
    /// The borrow is exclusive and the tensor writable (a `TensorMut`'s).
    unsafe fn slice_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `slice`; exclusive and writable by this function's contract, and the
        // slice borrows `self` mutably.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<'a, 'py, T: AnyBitPattern, const NDIM: usize> FromPyObject<'a, 'py> for TensorRef<T, NDIM> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        Held::import::<NDIM>(&obj, false).map(|held| TensorRef { held })
    }
}

impl<'a, 'py, T: AnyBitPattern, const NDIM: usize> FromPyObject<'a, 'py> for TensorMut<T, NDIM> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        Held::import::<NDIM>(&obj, true).map(|held| TensorMut { held })
    }
}

/// The metadata accessors every typed argument shares (`TensorRef` / `TensorMut` here, the
/// views and the device arguments): its `held.source` is a [`Source`]. `strides` and `device`
/// say what the argument type guarantees of them.
macro_rules! source_metadata {
    (impl[$($g:tt)*] $ty:ty, strides: $strides:literal, device: $device:literal) => {
        impl<$($g)*> $ty {
            /// Extent of each dimension.
            pub fn shape(&self) -> &[i64] {
                self.held.source.shape()
            }

            #[doc = $strides]
            pub fn strides(&self) -> Cow<'_, [i64]> {
                self.held.source.strides()
            }

            /// Number of dimensions.
            pub fn ndim(&self) -> usize {
                self.shape().len()
            }

            /// The element type as DLPack describes it (`T::DTYPE`).
            pub fn dtype(&self) -> DLDataType {
                self.held.source.dtype()
            }

            #[doc = $device]
            pub fn device(&self) -> DLDevice {
                self.held.source.device()
            }
        }
    };
}
#[cfg(feature = "ndarray")]
pub(super) use source_metadata;

source_metadata!(impl[T, const N: usize] TensorRef<T, N>,
    strides: "Strides in elements, as the producer gave them (compact row-major when it gave none; \
              the argument is C-contiguous, so only axes of extent 1 may differ from that).",
    device: "Where the memory lives (the CPU: typed arguments are host views).");
source_metadata!(impl[T, const N: usize] TensorMut<T, N>,
    strides: "Strides in elements, as the producer gave them (compact row-major when it gave none; \
              the argument is C-contiguous, so only axes of extent 1 may differ from that).",
    device: "Where the memory lives (the CPU: typed arguments are host views).");

impl<T, const N: usize> Deref for TensorRef<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.held.slice()
    }
}

impl<T, const N: usize> Deref for TensorMut<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.held.slice()
    }
}

impl<T, const N: usize> DerefMut for TensorMut<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: a `TensorMut` holds an exclusive borrow of a tensor checked writable at
        // extraction.
        unsafe { self.held.slice_mut() }
    }
}

impl<T: fmt::Debug, const N: usize> fmt::Debug for TensorRef<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorRef")
            .field("shape", &self.shape())
            .field("data", &&**self)
            .finish()
    }
}

impl<T: fmt::Debug, const N: usize> fmt::Debug for TensorMut<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorMut")
            .field("shape", &self.shape())
            .field("data", &&**self)
            .finish()
    }
}
