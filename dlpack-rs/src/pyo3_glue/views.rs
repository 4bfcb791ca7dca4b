//! Typed `#[pyfunction]` arguments of any layout, read through ndarray views (features `pyo3`
//! and `ndarray`): [`TensorView`] (shared) and [`TensorViewMut`] (exclusive) fix the element
//! type, the shape (a [`Shape`]: an ndarray dimension such as [`Ix2`](ndarray::Ix2), or fixed
//! extents such as [`Shape3<ANY, ANY, 3>`](Shape3)) and the layout (a [`Layout`]: [`Strided`],
//! [`CContig`] or [`FContig`]) in the signature; [`AnyOf2`] / [`AnyOf3`] take one of several
//! element types.

use core::fmt;
use core::marker::PhantomData;

use ndarray::{ArrayView, ArrayViewMut, Dimension};
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::Borrowed;

use alloc::borrow::Cow;

use super::errors::{tuple_of, tuple_str};
use super::extract::{dtype_error, Source};
use super::framework::Framework;
use crate::ffi::{DLDataType, DLDevice};
use crate::safe::borrow::BorrowToken;
use crate::safe::ndarray::Normalized;
use crate::safe::{AnyBitPattern, Error};

/// An extent of a [`Shape1`] .. [`Shape4`] that accepts any size.
pub const ANY: usize = usize::MAX;

mod sealed {
    pub trait Sealed {}
}

/// The shape a [`TensorView`] / [`TensorViewMut`] argument must have: an ndarray dimension
/// type ([`Ix0`](type@ndarray::Ix0) .. [`Ix6`](type@ndarray::Ix6): that many dimensions of any extent;
/// [`IxDyn`](type@ndarray::IxDyn): any shape), or [`Shape1`] .. [`Shape4`] with fixed extents
/// ([`ANY`] for a free one). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensor shape",
    label = "not a `Shape`",
    note = "use an ndarray dimension (`Ix2`, `IxDyn`, ...) or fixed extents (`Shape3<ANY, ANY, 3>`)"
)]
pub trait Shape: sealed::Sealed + 'static {
    /// The ndarray dimension type of the views.
    type Dim: Dimension;
    /// The extent of each dimension ([`ANY`] for a free one), or `None` for any number of
    /// dimensions.
    const EXTENTS: Option<&'static [usize]>;
}

macro_rules! ix_shapes {
    ($($ix:ident $n:literal),*) => {$(
        impl sealed::Sealed for ndarray::$ix {}
        impl Shape for ndarray::$ix {
            type Dim = ndarray::$ix;
            const EXTENTS: Option<&'static [usize]> = Some(&[ANY; $n]);
        }
    )*};
}
ix_shapes!(Ix0 0, Ix1 1, Ix2 2, Ix3 3, Ix4 4, Ix5 5, Ix6 6);

impl sealed::Sealed for ndarray::IxDyn {}
impl Shape for ndarray::IxDyn {
    type Dim = ndarray::IxDyn;
    const EXTENTS: Option<&'static [usize]> = None;
}

macro_rules! fixed_shapes {
    ($($(#[$doc:meta])* $name:ident $ix:ident [$($e:ident),*];)*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $name<$(const $e: usize),*> {}
        impl<$(const $e: usize),*> sealed::Sealed for $name<$($e),*> {}
        impl<$(const $e: usize),*> Shape for $name<$($e),*> {
            type Dim = ndarray::$ix;
            const EXTENTS: Option<&'static [usize]> = Some(&[$($e),*]);
        }
    )*};
}
fixed_shapes! {
    /// A 1-d [`Shape`] of extent `A` ([`ANY`]: any).
    Shape1 Ix1 [A];
    /// A 2-d [`Shape`] of extents `A`, `B` ([`ANY`]: any).
    Shape2 Ix2 [A, B];
    /// A 3-d [`Shape`] of extents `A`, `B`, `C` ([`ANY`]: any): an RGB image is
    /// `Shape3<ANY, ANY, 3>`.
    Shape3 Ix3 [A, B, C];
    /// A 4-d [`Shape`] of extents `A` .. `D` ([`ANY`]: any).
    Shape4 Ix4 [A, B, C, D];
}

/// The layout a [`TensorView`] / [`TensorViewMut`] argument must have: [`Strided`] (any),
/// [`CContig`] (row-major) or [`FContig`] (column-major). Sealed.
pub trait Layout: sealed::Sealed + 'static {
    /// Whether `shape` with `strides` (in elements) is accepted.
    fn accepts(shape: &[i64], strides: &[i64]) -> bool;
    /// What the error says is expected, and how to get it.
    const EXPECTED: &'static str;
}

/// Any strides: transposed, sliced, negative, broadcast (shared views only).
#[derive(Debug)]
pub enum Strided {}
/// Compact row-major (C order), as `np.ascontiguousarray` makes.
#[derive(Debug)]
pub enum CContig {}
/// Compact column-major (Fortran order), as `np.asfortranarray` makes.
#[derive(Debug)]
pub enum FContig {}

impl sealed::Sealed for Strided {}
impl sealed::Sealed for CContig {}
impl sealed::Sealed for FContig {}

impl Layout for Strided {
    fn accepts(_: &[i64], _: &[i64]) -> bool {
        true
    }
    const EXPECTED: &'static str = "a tensor";
}

impl Layout for CContig {
    fn accepts(shape: &[i64], strides: &[i64]) -> bool {
        crate::safe::is_c_contiguous(shape, strides)
    }
    const EXPECTED: &'static str = "a C-contiguous (row-major) tensor (pass \
        np.ascontiguousarray(x) in numpy, x.contiguous() in torch)";
}

impl Layout for FContig {
    fn accepts(shape: &[i64], strides: &[i64]) -> bool {
        let shape: alloc::vec::Vec<i64> = shape.iter().rev().copied().collect();
        let strides: alloc::vec::Vec<i64> = strides.iter().rev().copied().collect();
        crate::safe::is_c_contiguous(&shape, &strides)
    }
    const EXPECTED: &'static str = "an F-contiguous (column-major) tensor (pass \
        np.asfortranarray(x) in numpy, x.mT.contiguous().mT in torch)";
}

/// Checks `shape` against `S` (`TypeError` naming both shapes).
fn check_shape<S: Shape>(shape: &[i64]) -> PyResult<()> {
    let Some(extents) = S::EXTENTS else {
        return Ok(());
    };
    let fits = shape.len() == extents.len()
        && shape
            .iter()
            .zip(extents)
            .all(|(&got, &want)| want == ANY || got as u64 == want as u64);
    if fits {
        return Ok(());
    }
    let got = tuple_of(shape);
    if extents.iter().all(|&e| e == ANY) {
        return Err(PyTypeError::new_err(format!(
            "expected a {}-dimensional tensor, got {} dimension(s) (shape {got})",
            extents.len(),
            shape.len(),
        )));
    }
    let want = tuple_str(extents.iter().map(|&e| (e != ANY).then_some(e as i64)));
    Err(PyTypeError::new_err(format!(
        "expected shape {want}, got {got}"
    )))
}

/// Checks an imported tensor's dtype (against `dtype`: an [`AnyOf3`] has already matched it),
/// shape (against `S`) and layout (against `L`), each refusal naming what was expected, what
/// came and the fix.
pub(super) fn check_meta<S: Shape, L: Layout>(source: &Source, dtype: DLDataType) -> PyResult<()> {
    if source.dtype() != dtype {
        return Err(dtype_error(&[dtype], source.dtype()));
    }
    check_shape::<S>(source.shape())?;
    if !L::accepts(source.shape(), &source.strides()) {
        return Err(PyBufferError::new_err(format!(
            "expected {}, got shape {} with strides {}",
            L::EXPECTED,
            tuple_of(source.shape()),
            tuple_of(&source.strides()),
        )));
    }
    Ok(())
}

/// The Python exception for an error of the layout checks and borrow that follow
/// [`check_meta`] (two indices reaching one element of a writable tensor says so and the fix).
pub(super) fn layout_error(source: &Source, err: Error) -> PyErr {
    match err {
        Error::Overlapping => PyBufferError::new_err(format!(
            "expected a writable tensor whose elements are distinct, got shape {} with \
             strides {}, where two indices reach one element (a broadcast or expanded \
             view): pass a copy (x.copy() in numpy, x.clone() in torch)",
            tuple_of(source.shape()),
            tuple_of(&source.strides()),
        )),
        e => e.into(),
    }
}

/// What both view argument types hold: the layout, its borrow, the tensor, and the caller's
/// framework.
struct Viewed<T> {
    layout: Normalized<T>,
    // Dropped before the source (fields drop in order).
    _borrow: BorrowToken,
    source: Source,
    framework: Framework,
}

impl<T: AnyBitPattern> Viewed<T> {
    /// Checks an imported tensor against `T`, `S` and `L` (dtype first: an [`AnyOf3`] has
    /// already matched it) and borrows every byte it addresses.
    fn finish<S: Shape, L: Layout>(
        source: Source,
        exclusive: bool,
        framework: Framework,
    ) -> PyResult<Self> {
        check_meta::<S, L>(&source, T::DTYPE)?;
        let parts = source.strided_parts::<T>(exclusive);
        match parts {
            Ok((layout, borrow)) => Ok(Viewed {
                layout,
                _borrow: borrow,
                source,
                framework,
            }),
            Err(e) => Err(layout_error(&source, e)),
        }
    }

    /// Imports `obj` and checks it against `T`, `S` and `L`.
    fn import<S: Shape, L: Layout>(obj: &Bound<'_, PyAny>, exclusive: bool) -> PyResult<Self> {
        let framework = Framework::of(obj);
        let source = Source::import(obj, exclusive)?;
        Self::finish::<S, L>(source, exclusive, framework)
    }
}

/// A read-only tensor argument of element type `T`, shape `S` and layout `L` (any strides by
/// default: transposed, sliced, negative, broadcast) from any DLPack producer, read as an
/// [`ndarray::ArrayView`] (ndarray 0.17, re-exported as [`dlpack_rs::ndarray`](crate::ndarray)).
///
/// Extraction imports the object without a copy (through the producer's non-owning exchange
/// table where it has one, as [`TensorRef`](super::TensorRef) does), then checks, each with a
/// Python exception naming what was expected, what came and the fix: the element type
/// (`TypeError`: `expected a tensor of float32, got float64`), the shape (`TypeError`:
/// `expected shape (*, *, 3), got (480, 640, 4)`), the layout (`BufferError`) and the device
/// (`BufferError`: host memory only). It then takes a shared borrow of exactly the bytes the
/// elements address in the [borrow registry](crate::safe#the-borrow-registry), held until the argument drops.
///
/// [`TensorView::framework`] remembers the caller's framework, to hand a result back as the
/// caller's kind of array ([`Framework::wrap`]).
///
/// ```
/// use dlpack_rs::ndarray::{Array2, Ix2};
/// use dlpack_rs::pyo3_glue::{Shape3, TensorView, ANY};
/// use pyo3::prelude::*;
///
/// /// The mean of the three channels of an RGB image of any layout: a float32 image of the
/// /// caller's framework (numpy in, numpy out; torch in, torch out).
/// #[pyfunction]
/// fn gray<'py>(
///     py: Python<'py>,
///     image: TensorView<f32, Shape3<ANY, ANY, 3>>,
/// ) -> PyResult<Bound<'py, PyAny>> {
///     let rgb = image.view();
///     let out: Array2<f32> = rgb.map_axis(dlpack_rs::ndarray::Axis(2), |px| px.sum() / 3.0);
///     image.framework().wrap(py, out)
/// }
/// # let _: Option<TensorView<f32, Ix2>> = None;
/// # fn main() {}
/// ```
pub struct TensorView<T, S: Shape = ndarray::IxDyn, L: Layout = Strided> {
    held: Viewed<T>,
    _shape: PhantomData<(S, L)>,
}

/// A writable tensor argument of element type `T`, shape `S` and layout `L` from any DLPack
/// producer, read and written as an [`ndarray::ArrayViewMut`].
///
/// As [`TensorView`], and: the tensor must be writable (`BufferError` saying why it is not:
/// a legacy capsule, or a producer's `READ_ONLY` flag such as a read-only numpy array's); no
/// two indices may reach one element (`BufferError`: a broadcast view cannot be written); and
/// the borrow is exclusive: extraction raises `BufferError` while any other view of those bytes
/// exists (so `f(x, x.T)` with two writable arguments is refused).
pub struct TensorViewMut<T, S: Shape = ndarray::IxDyn, L: Layout = Strided> {
    held: Viewed<T>,
    _shape: PhantomData<(S, L)>,
}

// SAFETY: a `TensorView` is an owner plus a shared view of its elements, like
// `(PyTensor, ArrayView<T>)`.
unsafe impl<T: Sync, S: Shape, L: Layout> Send for TensorView<T, S, L> {}
// SAFETY: as above.
unsafe impl<T: Sync, S: Shape, L: Layout> Sync for TensorView<T, S, L> {}
// SAFETY: a `TensorViewMut` is an owner plus an exclusive view, like
// `(PyTensor, ArrayViewMut<T>)`.
unsafe impl<T: Send, S: Shape, L: Layout> Send for TensorViewMut<T, S, L> {}
// SAFETY: as above; `&TensorViewMut` gives only shared views.
unsafe impl<T: Sync, S: Shape, L: Layout> Sync for TensorViewMut<T, S, L> {}

impl<'a, 'py, T: AnyBitPattern, S: Shape, L: Layout> FromPyObject<'a, 'py> for TensorView<T, S, L> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        Viewed::import::<S, L>(&obj, false).map(|held| TensorView {
            held,
            _shape: PhantomData,
        })
    }
}

impl<'a, 'py, T: AnyBitPattern, S: Shape, L: Layout> FromPyObject<'a, 'py>
    for TensorViewMut<T, S, L>
{
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        Viewed::import::<S, L>(&obj, true).map(|held| TensorViewMut {
            held,
            _shape: PhantomData,
        })
    }
}

macro_rules! accessors {
    ($ty:ident) => {
        super::extract::source_metadata!(impl[T, S: Shape, L: Layout] $ty<T, S, L>,
            strides: "Strides in elements, as the producer gave them (compact row-major strides \
                      when it gave none).",
            device: "Where the memory lives (the CPU: typed arguments are host views).");
        impl<T, S: Shape, L: Layout> $ty<T, S, L> {
            /// The elements as an ndarray view with the tensor's exact layout.
            pub fn view(&self) -> ArrayView<'_, T, S::Dim> {
                // SAFETY: `finish` checked and borrowed the layout (its dimensions are `S`'s),
                // whose memory `source` keeps alive while `self`, which the view borrows,
                // lives; a mutable view needs `&mut self`, so none is alive now.
                unsafe { self.held.layout.view::<S::Dim>() }
            }

            /// The framework the argument came from, to hand results back in kind.
            pub fn framework(&self) -> &Framework {
                &self.held.framework
            }
        }

        impl<T: fmt::Debug, S: Shape, L: Layout> fmt::Debug for $ty<T, S, L> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("data", &self.view())
                    .finish()
            }
        }
    };
}
accessors!(TensorView);
accessors!(TensorViewMut);

impl<T, S: Shape, L: Layout> TensorViewMut<T, S, L> {
    /// The elements as a mutable ndarray view with the tensor's exact layout.
    pub fn view_mut(&mut self) -> ArrayViewMut<'_, T, S::Dim> {
        // SAFETY: `finish` checked the tensor writable, its elements distinct, and borrowed them
        // exclusively; the memory lives while `self` does, and `&mut self` keeps every other
        // view made from the layout away while this one lives.
        unsafe { self.held.layout.view_mut::<S::Dim>() }
    }
}

macro_rules! any_of {
    ($(#[$doc:meta])* $name:ident { $($v:ident),* }) => {
        any_of!(@ $(#[$doc])* $name { $($v),* } TensorView, false);
    };
    ($(#[$doc:meta])* mut $name:ident { $($v:ident),* }) => {
        any_of!(@ $(#[$doc])* $name { $($v),* } TensorViewMut, true);
    };
    (@ $(#[$doc:meta])* $name:ident { $($v:ident),* } $view:ident, $exclusive:expr) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $name<$($v: AnyBitPattern),*, S: Shape = ndarray::IxDyn, L: Layout = Strided> {
            $(
                #[doc = concat!("A tensor of the element type `", stringify!($v), "`.")]
                $v($view<$v, S, L>),
            )*
        }

        impl<'a, 'py, $($v: AnyBitPattern),*, S: Shape, L: Layout> FromPyObject<'a, 'py>
            for $name<$($v),*, S, L>
        {
            type Error = PyErr;

            fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
                let framework = Framework::of(&obj);
                let source = Source::import(&obj, $exclusive)?;
                let dtype = source.dtype();
                $(
                    if dtype == $v::DTYPE {
                        let held = Viewed::<$v>::finish::<S, L>(source, $exclusive, framework)?;
                        return Ok($name::$v($view { held, _shape: PhantomData }));
                    }
                )*
                Err(dtype_error(&[$($v::DTYPE),*], dtype))
            }
        }
    };
}

any_of! {
    /// A read-only tensor argument of one of two element types, `A` or `B` (shape `S`, layout
    /// `L`): the variant says which came. Extraction imports once; any other dtype raises
    /// `TypeError` naming both (`expected a tensor of uint8 or float32, got int64`).
    AnyOf2 { A, B }
}

any_of! {
    /// A read-only tensor argument of one of three element types (shape `S`, layout `L`): the
    /// variant says which came. Extraction imports once; any other dtype raises `TypeError`
    /// naming all three (`expected a tensor of uint8, uint16 or float32, got float64`).
    ///
    /// ```
    /// use dlpack_rs::pyo3_glue::{AnyOf3, Shape3, ANY};
    /// use pyo3::prelude::*;
    ///
    /// /// The brightest value of an 8-bit, 16-bit or float image with three channels, as a float.
    /// #[pyfunction]
    /// fn peak(image: AnyOf3<u8, u16, f32, Shape3<ANY, ANY, 3>>) -> f64 {
    ///     match image {
    ///         AnyOf3::A(v) => v.view().iter().copied().max().unwrap_or(0) as f64,
    ///         AnyOf3::B(v) => v.view().iter().copied().max().unwrap_or(0) as f64,
    ///         AnyOf3::C(v) => v.view().iter().copied().fold(f32::MIN, f32::max) as f64,
    ///     }
    /// }
    /// # fn main() {}
    /// ```
    AnyOf3 { A, B, C }
}

any_of! {
    /// A writable tensor argument of one of two element types, `A` or `B` (shape `S`, layout
    /// `L`), as [`AnyOf2`] but each variant a [`TensorViewMut`] (exclusive borrow, writable
    /// memory, no element addressed twice).
    mut AnyOf2Mut { A, B }
}

any_of! {
    /// A writable tensor argument of one of three element types, as [`AnyOf3`] but each variant
    /// a [`TensorViewMut`]: an in-place kernel over `uint8 | uint16 | float32` images.
    ///
    /// ```
    /// use dlpack_rs::pyo3_glue::{AnyOf3Mut, Shape3, ANY};
    /// use pyo3::prelude::*;
    ///
    /// /// Inverts an 8-bit, 16-bit or float (0..1) RGB image in place.
    /// #[pyfunction]
    /// fn invert(image: AnyOf3Mut<u8, u16, f32, Shape3<ANY, ANY, 3>>) {
    ///     match image {
    ///         AnyOf3Mut::A(mut v) => v.view_mut().mapv_inplace(|x| u8::MAX - x),
    ///         AnyOf3Mut::B(mut v) => v.view_mut().mapv_inplace(|x| u16::MAX - x),
    ///         AnyOf3Mut::C(mut v) => v.view_mut().mapv_inplace(|x| 1.0 - x),
    ///     }
    /// }
    /// # fn main() {}
    /// ```
    mut AnyOf3Mut { A, B, C }
}
