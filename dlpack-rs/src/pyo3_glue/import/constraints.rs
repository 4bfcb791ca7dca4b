//! What a typed argument's signature demands besides the element type: shape, layout, device.

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::PyErr;
use pyo3::PyResult;

use crate::ffi::DLDataType;
use crate::pyo3_glue::import::source::{dtype_error, Source};
use crate::pyo3_glue::runtime::errors::{tuple_of, tuple_str};
use crate::safe::Error;

/// An extent of [`Dims`], or its number of dimensions, that accepts any.
pub const ANY: usize = usize::MAX;

mod sealed {
    pub trait Sealed {}
}

/// The shape a typed argument must have: a [`Dims`]. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensor shape",
    label = "not a `Shape`",
    note = "use a number of dimensions (`Dims<2>`, `Dims<ANY>`) and extents (`Dims<3, ANY, ANY, 3>`)"
)]
pub trait Shape: sealed::Sealed + 'static {
    /// The ndarray dimension type of the views (feature `ndarray`).
    #[cfg(feature = "ndarray")]
    #[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
    type Dim: ndarray::Dimension;
    /// Each dimension's extent ([`ANY`]: free), or `None` for any number of dimensions.
    const EXTENTS: Option<&'static [usize]>;
}

/// A [`Shape`] of `N` dimensions (`N` <= 6, or [`ANY`]), the first four of extents `A` .. `D`
/// ([`ANY`]: free): `Dims<2>` is any matrix, `Dims<3, ANY, ANY, 3>` an RGB image.
#[derive(Debug)]
pub enum Dims<
    const N: usize = ANY,
    const A: usize = ANY,
    const B: usize = ANY,
    const C: usize = ANY,
    const D: usize = ANY,
> {}

macro_rules! dims {
    ($($n:tt $ix:ident [$($e:ident),*] [$($free:ident),*];)*) => {$(
        impl<const A: usize, const B: usize, const C: usize, const D: usize> sealed::Sealed
            for Dims<$n, A, B, C, D> {}
        impl<const A: usize, const B: usize, const C: usize, const D: usize> Shape
            for Dims<$n, A, B, C, D>
        {
            #[cfg(feature = "ndarray")]
            type Dim = ndarray::$ix;
            const EXTENTS: Option<&'static [usize]> = {
                assert!(true $(&& $free == ANY)*, "Dims<N, A, B, C, D>: an extent past the N-th must stay ANY");
                Some(&[$($e),*])
            };
        }
    )*};
}
dims! {
    0 Ix0 [] [A, B, C, D];
    1 Ix1 [A] [B, C, D];
    2 Ix2 [A, B] [C, D];
    3 Ix3 [A, B, C] [D];
    4 Ix4 [A, B, C, D] [];
    5 Ix5 [A, B, C, D, ANY] [];
    6 Ix6 [A, B, C, D, ANY, ANY] [];
}

impl<const A: usize, const B: usize, const C: usize, const D: usize> sealed::Sealed
    for Dims<ANY, A, B, C, D>
{
}
impl<const A: usize, const B: usize, const C: usize, const D: usize> Shape
    for Dims<ANY, A, B, C, D>
{
    #[cfg(feature = "ndarray")]
    type Dim = ndarray::IxDyn;
    const EXTENTS: Option<&'static [usize]> = {
        assert!(
            A == ANY && B == ANY && C == ANY && D == ANY,
            "Dims<ANY, ..>: extents need a number of dimensions (Dims<3, ANY, ANY, 3>)"
        );
        None
    };
}

/// The layout a typed argument must have: [`Strided`], [`CContig`] or [`FContig`]. Sealed.
pub trait Layout: sealed::Sealed + 'static {
    /// Whether `shape` with `strides` (in elements) is accepted.
    fn accepts(shape: &[i64], strides: &[i64]) -> bool;
    /// What the error says is expected, and how to get it.
    const EXPECTED: &'static str;
    /// Whether the elements are one C-contiguous slice (taken by the slice route).
    const SLICE: bool = false;
}

/// Any strides: transposed, sliced, negative, broadcast (shared views only).
#[derive(Debug)]
pub enum Strided {}
/// Compact row-major (C order), as `np.ascontiguousarray` makes: a CPU argument derefs to `[T]`.
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
    const SLICE: bool = true;
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

/// Where a typed argument's memory may live: [`Cpu`] or [`AnyDevice`]. Sealed.
pub trait Device: sealed::Sealed + 'static {}

/// CPU memory (`kDLCPU` only): the argument hands out slices, elements and ndarray views.
#[derive(Debug)]
pub enum Cpu {}
/// Memory on any device: only [`data_ptr`](crate::pyo3_glue::TensorView::data_ptr) is given.
#[derive(Debug)]
pub enum AnyDevice {}

impl sealed::Sealed for Cpu {}
impl sealed::Sealed for AnyDevice {}
impl Device for Cpu {}
impl Device for AnyDevice {}

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

/// Checks a tensor's dtype (against `dtype`), shape (`S`) and, unless the slice route does, layout.
pub(in crate::pyo3_glue) fn check_meta<S: Shape, L: Layout>(
    source: &Source,
    dtype: DLDataType,
    slice_route: bool,
) -> PyResult<()> {
    let (shape, _, got, _) = source.meta();
    if got != dtype {
        return Err(dtype_error(&[dtype], got));
    }
    check_shape::<S>(shape)?;
    if !slice_route && !L::accepts(shape, &source.strides()) {
        return Err(layout_mismatch::<L>(source));
    }
    Ok(())
}

fn layout_mismatch<L: Layout>(source: &Source) -> PyErr {
    PyBufferError::new_err(format!(
        "expected {}, got shape {} with strides {}",
        L::EXPECTED,
        tuple_of(source.shape()),
        tuple_of(&source.strides()),
    ))
}

/// The Python exception for a layout or overlap error of the checks after [`check_meta`].
pub(in crate::pyo3_glue) fn layout_error<L: Layout>(source: &Source, err: Error) -> PyErr {
    match err {
        Error::NotContiguous => layout_mismatch::<L>(source),
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
