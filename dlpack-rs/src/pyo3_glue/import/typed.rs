//! The typed `#[pyfunction]` arguments [`TensorView`] and [`TensorViewMut`].

use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use pyo3::sync::PyOnceLock;

use pyo3::prelude::*;
use pyo3::Borrowed;

use alloc::borrow::Cow;

use crate::ffi::{DLDataType, DLDevice};
use crate::pyo3_glue::export::framework::Framework;
use crate::pyo3_glue::import::constraints::{
    check_meta, layout_error, AnyDevice, CContig, Cpu, Device, Dims, Layout, Shape, Strided, ANY,
};
use crate::pyo3_glue::import::source::Source;
use crate::safe::borrow::BorrowToken;
use crate::safe::import::strided::Normalized;
use crate::safe::{AnyBitPattern, Element, Error};

/// How the checked elements are reached.
enum Parts<T> {
    /// `len` C-contiguous elements from the first (a [`CContig`] argument on the CPU).
    Slice(usize),
    /// Any strides on the CPU: the layout rebased on its lowest addressed element.
    Strided(#[cfg_attr(not(feature = "ndarray"), allow(dead_code))] Normalized<T>),
    /// Any device: the first element's address only.
    Raw,
}

struct Held<'py, T> {
    first: *mut T,
    parts: Parts<T>,
    // Dropped before the source (fields drop in order).
    _borrow: BorrowToken,
    source: Source<'py>,
    framework: PyOnceLock<Framework>,
}

impl<'py, T: Element> Held<'py, T> {
    /// Checks an imported `source` against `T`, `S` and `L`, then borrows its bytes.
    fn host_from<S: Shape, L: Layout>(source: Source<'py>, exclusive: bool) -> PyResult<Self>
    where
        T: AnyBitPattern,
    {
        check_meta::<S, L>(&source, T::DTYPE, L::SLICE)?;
        let parts = source.parts(exclusive).and_then(|p| {
            if L::SLICE {
                // SAFETY: validated parts (an owner's or a view's) of memory the held `source`
                // keeps alive, and it drops after the token.
                let (first, len, token) = unsafe { p.slice::<T>(exclusive) }?;
                if len == 0 {
                    // The strided route's check: an ndarray view of the shape must exist.
                    let shape: alloc::vec::Vec<usize> =
                        p.shape.iter().map(|&d| d as usize).collect();
                    crate::safe::import::strided::viewable_empty(&shape)?;
                }
                Ok((first, Parts::Slice(len), token))
            } else {
                // SAFETY: as for the slice.
                let (n, token) = unsafe { p.strided::<T>(exclusive) }?;
                Ok((n.first(), Parts::Strided(n), token))
            }
        });
        Self::new::<L>(parts, source)
    }

    /// Imports `obj` on any device, checks it and borrows its bytes (no host view is made).
    fn raw<S: Shape, L: Layout>(obj: &Bound<'py, PyAny>, exclusive: bool) -> PyResult<Self> {
        let source = Source::import(obj, exclusive)?;
        check_meta::<S, L>(&source, T::DTYPE, false)?;
        // SAFETY: the external context lives with the held `source`, after the token.
        let parts = source
            .parts(exclusive)
            .and_then(|p| unsafe { p.raw::<T>(exclusive) })
            .map(|(first, token)| (first, Parts::Raw, token));
        Self::new::<L>(parts, source)
    }

    fn new<L: Layout>(
        parts: Result<(*mut T, Parts<T>, BorrowToken), Error>,
        source: Source<'py>,
    ) -> PyResult<Self> {
        match parts {
            Ok((first, parts, borrow)) => Ok(Held {
                first,
                parts,
                _borrow: borrow,
                source,
                framework: PyOnceLock::new(),
            }),
            Err(e) => Err(layout_error::<L>(&source, e)),
        }
    }
}

impl<T> Held<'_, T> {
    /// The framework of the object the tensor came from, made on first use.
    fn framework(&self) -> &Framework {
        let obj = &self.source.object;
        crate::pyo3_glue::runtime::once::get_or_init(&self.framework, obj.py(), || {
            Framework::of(obj)
        })
    }

    /// The number of elements when they form one C-contiguous run, as extraction checked.
    fn contiguous_len(&self) -> Option<usize> {
        match &self.parts {
            Parts::Slice(len) => Some(*len),
            Parts::Strided(n) => n.contiguous_len(),
            Parts::Raw => None,
        }
    }

    /// The address of the element at `index` within the shape, bounded by what extraction borrowed.
    fn element(&self, index: &[usize]) -> Option<*mut T> {
        match &self.parts {
            Parts::Slice(len) => {
                let shape = self.source.shape();
                if index.len() != shape.len()
                    || index.iter().zip(shape).any(|(&i, &d)| i as u64 >= d as u64)
                {
                    return None;
                }
                let linear = index.iter().zip(shape).try_fold(0usize, |acc, (&i, &d)| {
                    acc.checked_mul(d as usize)?.checked_add(i)
                })?;
                (linear < *len).then(|| self.first.wrapping_add(linear))
            }
            Parts::Strided(n) => n.element(index),
            Parts::Raw => None,
        }
    }

    /// # Safety
    /// The parts are host parts (not `Raw`) and no mutable view made from them is alive.
    unsafe fn slice(&self) -> Option<&[T]> {
        let len = self.contiguous_len()?;
        if len == 0 {
            return Some(&[]);
        }
        // SAFETY: `len` elements `host_from` checked and borrowed, kept alive by `self.source`.
        Some(unsafe { core::slice::from_raw_parts(self.first, len) })
    }

    /// # Safety
    /// As [`Held::slice`]; the borrow is exclusive, of writable memory, no element addressed twice.
    unsafe fn slice_mut(&mut self) -> Option<&mut [T]> {
        let len = self.contiguous_len()?;
        if len == 0 {
            return Some(&mut []);
        }
        // SAFETY: as in `slice`; exclusive and writable by the contract; borrows `self` mutably.
        Some(unsafe { core::slice::from_raw_parts_mut(self.first, len) })
    }

    /// The ndarray view of host parts with `D`'s dimensions.
    /// # Safety
    /// As [`Held::slice`]; `D` has as many dimensions as the tensor (any, for `IxDyn`).
    #[cfg(feature = "ndarray")]
    unsafe fn view<'a, D: ndarray::Dimension>(&'a self) -> ndarray::ArrayView<'a, T, D> {
        match &self.parts {
            // SAFETY: forwarded from this function's contract.
            Parts::Strided(n) => unsafe { n.view::<D>() },
            // SAFETY: `len` checked, borrowed elements in C order; the shape's product is `len`
            // (for an empty tensor its non-zero extents' product fits `isize`: `host_from`).
            Parts::Slice(_) => unsafe {
                ndarray::ArrayView::from_shape_ptr(self.dims::<D>(), self.first)
            },
            Parts::Raw => unreachable!("a host view of an any-device argument"),
        }
    }

    /// The mutable ndarray view of host parts with `D`'s dimensions.
    /// # Safety
    /// As [`Held::slice_mut`]; `D` as for [`Held::view`].
    #[cfg(feature = "ndarray")]
    unsafe fn view_mut<'a, D: ndarray::Dimension>(&'a mut self) -> ndarray::ArrayViewMut<'a, T, D> {
        match &self.parts {
            // SAFETY: forwarded from this function's contract.
            Parts::Strided(n) => unsafe { n.view_mut::<D>() },
            // SAFETY: as in `view`; exclusive and writable by this function's contract.
            Parts::Slice(_) => unsafe {
                ndarray::ArrayViewMut::from_shape_ptr(self.dims::<D>(), self.first)
            },
            Parts::Raw => unreachable!("a host view of an any-device argument"),
        }
    }

    /// The tensor's shape as `D`; panics if the producer changed it since extraction.
    #[cfg(feature = "ndarray")]
    fn dims<D: ndarray::Dimension>(&self) -> D {
        let shape = self.source.shape();
        if let Parts::Slice(len) = self.parts {
            let now = shape
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d as usize));
            assert!(
                now == Some(len) || (len == 0 && shape.contains(&0)),
                "the producer changed the shape of a tensor it handed over"
            );
        }
        let mut dims = D::zeros(shape.len());
        for (d, &e) in dims.slice_mut().iter_mut().zip(shape) {
            *d = e as usize;
        }
        dims
    }
}

/// A read-only tensor argument of element type `T`, shape `S`, layout `L` and device `D`.
///
/// Extraction imports without a copy, checks dtype and shape (`TypeError`), layout and device
/// (`BufferError`), then holds a shared [borrow](crate::safe#the-borrow-registry) of the
/// elements' bytes until dropped. A [`CContig`] argument derefs to `[T]`. More in the [import
/// guide](https://github.com/kornia/dlpack-rs/blob/main/docs/import.md#typed-arguments).
///
/// It lives for the call (`'py`): it is not `Send`, and releases its object on the thread that
/// made it. Keep a [`PyTensor`](crate::pyo3_glue::PyTensor) to hold an input past the call; to
/// work detached, take the slice.
///
/// ```
/// use dlpack_rs::pyo3_glue::{CContig, Dims, TensorView, ANY};
/// use pyo3::prelude::*;
///
/// #[pyfunction]
/// fn red(image: TensorView<'_, u8, Dims<3, ANY, ANY, 3>>, y: usize, x: usize) -> Option<u8> {
///     image.get(&[y, x, 0]).copied()
/// }
///
/// #[pyfunction]
/// fn total(py: Python<'_>, x: TensorView<'_, f32, Dims<ANY>, CContig>) -> f32 {
///     let values: &[f32] = &x;
///     py.detach(|| values.iter().sum())
/// }
/// # fn main() {}
/// ```
pub struct TensorView<'py, T, S: Shape = Dims<ANY>, L: Layout = Strided, D: Device = Cpu> {
    held: Held<'py, T>,
    _constraints: PhantomData<(S, L, D)>,
}

/// A writable tensor argument of element type `T`, shape `S`, layout `L` and device `D`.
///
/// As [`TensorView`], but the tensor must be writable and not broadcast, and the borrow is
/// exclusive (`f(x, x)` raises `BufferError`).
pub struct TensorViewMut<'py, T, S: Shape = Dims<ANY>, L: Layout = Strided, D: Device = Cpu> {
    held: Held<'py, T>,
    _constraints: PhantomData<(S, L, D)>,
}

macro_rules! extract {
    ($ty:ident, $exclusive:expr) => {
        impl<'py, T: AnyBitPattern, S: Shape, L: Layout> $ty<'py, T, S, L, Cpu> {
            /// The view of an imported `source` (whose dtype an `AnyOf` may have matched to `T`).
            pub(in crate::pyo3_glue) fn of(source: Source<'py>) -> PyResult<Self> {
                Held::host_from::<S, L>(source, $exclusive).map(|held| $ty {
                    held,
                    _constraints: PhantomData,
                })
            }
        }

        impl<'a, 'py, T: AnyBitPattern, S: Shape, L: Layout> FromPyObject<'a, 'py>
            for $ty<'py, T, S, L, Cpu>
        {
            type Error = PyErr;

            #[cfg(feature = "inspect")]
            const INPUT_TYPE: pyo3::inspect::PyStaticExpr =
                crate::pyo3_glue::runtime::type_hints::SUPPORTS_DLPACK;

            fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
                Source::import(&obj, $exclusive).and_then(Self::of)
            }
        }

        impl<'a, 'py, T: Element, S: Shape, L: Layout> FromPyObject<'a, 'py>
            for $ty<'py, T, S, L, AnyDevice>
        {
            type Error = PyErr;

            #[cfg(feature = "inspect")]
            const INPUT_TYPE: pyo3::inspect::PyStaticExpr =
                crate::pyo3_glue::runtime::type_hints::SUPPORTS_DLPACK;

            fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
                Held::raw::<S, L>(&obj, $exclusive).map(|held| $ty {
                    held,
                    _constraints: PhantomData,
                })
            }
        }
    };
}
extract!(TensorView, false);
extract!(TensorViewMut, true);

macro_rules! accessors {
    ($ty:ident) => {
        impl<T, S: Shape, L: Layout, D: Device> $ty<'_, T, S, L, D> {
            /// Extent of each dimension.
            pub fn shape(&self) -> &[i64] {
                self.held.source.shape()
            }

            /// Strides in elements as the producer gave them (compact row-major if none).
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

            /// Where the memory lives (host memory for [`Cpu`], any device for [`AnyDevice`]).
            pub fn device(&self) -> DLDevice {
                self.held.source.device()
            }

            /// The framework the argument came from, to hand results back in kind.
            pub fn framework(&self) -> &Framework {
                self.held.framework()
            }

            /// The address of element 0 (`data + byte_offset`) on [`device`](Self::device): aligned
            /// unless the tensor is empty, valid while the argument lives (device work must finish
            /// first), ordered on CUDA's legacy default stream. A [`TensorView`]'s is read-only.
            pub fn data_ptr(&self) -> *const T {
                self.held.first
            }
        }

        impl<T, S: Shape, L: Layout, D: Device> fmt::Debug for $ty<'_, T, S, L, D> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("device", &self.device())
                    .field("dtype", &self.dtype())
                    .field("shape", &self.shape())
                    .field("strides", &self.strides())
                    .field("data_ptr", &self.data_ptr())
                    .finish()
            }
        }

        impl<T, S: Shape, L: Layout> $ty<'_, T, S, L, Cpu> {
            /// The element at `index` (one index per dimension), or `None` outside the shape.
            pub fn get(&self, index: &[usize]) -> Option<&T> {
                let element = self.held.element(index)?;
                // SAFETY: a checked element of host parts (aligned, valid for `T`), borrowed while
                // `self` lives; a mutable view needs `&mut self`, so none is alive now.
                Some(unsafe { &*element })
            }

            /// The elements in row-major order when C-contiguous (always for [`CContig`]).
            pub fn as_slice(&self) -> Option<&[T]> {
                // SAFETY: as in `get`.
                unsafe { self.held.slice() }
            }

            /// The elements as an ndarray view with the tensor's exact layout (feature `ndarray`).
            #[cfg(feature = "ndarray")]
            #[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
            pub fn view(&self) -> ndarray::ArrayView<'_, T, S::Dim> {
                // SAFETY: as in `get`; the checked shape has `S`'s dimensions.
                unsafe { self.held.view::<S::Dim>() }
            }
        }

        impl<T, S: Shape> Deref for $ty<'_, T, S, CContig, Cpu> {
            type Target = [T];
            fn deref(&self) -> &[T] {
                // SAFETY: as in `get`; a `CContig` argument's parts are a slice.
                unsafe { self.held.slice() }.unwrap_or(&[])
            }
        }
    };
}
accessors!(TensorView);
accessors!(TensorViewMut);

impl<T, S: Shape, L: Layout> TensorViewMut<'_, T, S, L, Cpu> {
    /// The element at `index`, for writing, or `None` outside the shape.
    pub fn get_mut(&mut self, index: &[usize]) -> Option<&mut T> {
        let element = self.held.element(index)?;
        // SAFETY: as in `get`, of host parts checked writable, elements distinct, borrowed
        // exclusively at extraction; `&mut self` keeps every other view away while this one lives.
        Some(unsafe { &mut *element })
    }

    /// The elements as a mutable slice in row-major order when they are C-contiguous.
    pub fn as_slice_mut(&mut self) -> Option<&mut [T]> {
        // SAFETY: as in `get_mut`.
        unsafe { self.held.slice_mut() }
    }

    /// The elements as a mutable ndarray view with the tensor's exact layout.
    #[cfg(feature = "ndarray")]
    #[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
    pub fn view_mut(&mut self) -> ndarray::ArrayViewMut<'_, T, S::Dim> {
        // SAFETY: as in `get_mut`; the checked shape has `S`'s dimensions.
        unsafe { self.held.view_mut::<S::Dim>() }
    }
}

impl<T, S: Shape> DerefMut for TensorViewMut<'_, T, S, CContig, Cpu> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `get_mut`; a `CContig` argument's parts are a slice.
        unsafe { self.held.slice_mut() }.unwrap_or(&mut [])
    }
}

impl<T, S: Shape, L: Layout, D: Device> TensorViewMut<'_, T, S, L, D> {
    /// The address of the first element, for writing (rules as for [`TensorView::data_ptr`]).
    pub fn data_ptr_mut(&mut self) -> *mut T {
        self.held.first
    }
}
