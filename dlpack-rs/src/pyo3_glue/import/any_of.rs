//! Typed arguments of one of two or three element types: [`AnyOf`] and [`AnyOfMut`].

use core::convert::Infallible;

use pyo3::prelude::*;
use pyo3::Borrowed;

use crate::ffi::DLDataType;
use crate::pyo3_glue::import::constraints::{Dims, Layout, Shape, Strided, ANY};
use crate::pyo3_glue::import::source::{dtype_error, Source};
use crate::pyo3_glue::import::typed::{TensorView, TensorViewMut};
use crate::safe::{AnyBitPattern, Element};

/// The traits name `Source` (crate-private) in their functions, which only this crate calls.
#[allow(private_interfaces)]
mod sealed {
    use super::*;

    /// A set of element types: `(A, B)` or `(A, B, C)`.
    pub trait Dtypes {
        type A: AnyBitPattern;
        type B: AnyBitPattern;
        /// The third element type, or `Infallible` for a pair (its variant cannot occur).
        type C: Third;
    }

    impl<A: AnyBitPattern, B: AnyBitPattern> Dtypes for (A, B) {
        type A = A;
        type B = B;
        type C = Infallible;
    }

    impl<A: AnyBitPattern, B: AnyBitPattern, C: AnyBitPattern> Dtypes for (A, B, C) {
        type A = A;
        type B = B;
        type C = C;
    }

    /// The third member of a set: an element type, or `Infallible` (no third variant).
    pub trait Third {
        type View<'py, S: Shape, L: Layout>: core::fmt::Debug;
        type ViewMut<'py, S: Shape, L: Layout>: core::fmt::Debug;
        const CODE: Option<DLDataType>;
        /// The read-only view of a `source` of dtype [`Self::CODE`].
        fn view<'py, S: Shape, L: Layout>(source: Source<'py>) -> PyResult<Self::View<'py, S, L>>;
        /// The writable view of a `source` of dtype [`Self::CODE`].
        fn view_mut<'py, S: Shape, L: Layout>(
            source: Source<'py>,
        ) -> PyResult<Self::ViewMut<'py, S, L>>;
    }

    impl<T: AnyBitPattern> Third for T {
        type View<'py, S: Shape, L: Layout> = TensorView<'py, T, S, L>;
        type ViewMut<'py, S: Shape, L: Layout> = TensorViewMut<'py, T, S, L>;
        const CODE: Option<DLDataType> = Some(<T as Element>::DTYPE);
        fn view<'py, S: Shape, L: Layout>(
            source: Source<'py>,
        ) -> PyResult<TensorView<'py, T, S, L>> {
            TensorView::of(source)
        }
        fn view_mut<'py, S: Shape, L: Layout>(
            source: Source<'py>,
        ) -> PyResult<TensorViewMut<'py, T, S, L>> {
            TensorViewMut::of(source)
        }
    }

    impl Third for Infallible {
        type View<'py, S: Shape, L: Layout> = Infallible;
        type ViewMut<'py, S: Shape, L: Layout> = Infallible;
        const CODE: Option<DLDataType> = None;
        fn view<S: Shape, L: Layout>(_: Source<'_>) -> PyResult<Infallible> {
            unreachable!("no tensor has the dtype of a pair's missing third member")
        }
        fn view_mut<S: Shape, L: Layout>(_: Source<'_>) -> PyResult<Infallible> {
            unreachable!("no tensor has the dtype of a pair's missing third member")
        }
    }
}

use sealed::{Dtypes, Third};

/// A read-only tensor argument of one of the element types `D`, a pair `(A, B)` or a triple
/// `(A, B, C)`; the variant says which came (a `match` may leave out a pair's `C`).
///
/// ```
/// use dlpack_rs::pyo3_glue::{AnyOf, Dims, ANY};
/// use pyo3::prelude::*;
/// #[pyfunction]
/// fn peak(image: AnyOf<'_, (u8, u16, f32), Dims<3, ANY, ANY, 3>>) -> f64 {
///     match image {
///         AnyOf::A(v) => v.view().iter().copied().max().unwrap_or(0) as f64,
///         AnyOf::B(v) => v.view().iter().copied().max().unwrap_or(0) as f64,
///         AnyOf::C(v) => v.view().iter().copied().fold(f32::MIN, f32::max) as f64,
///     }
/// }
///
/// #[pyfunction]
/// fn is_float(x: AnyOf<'_, (i32, f64)>) -> bool {
///     match x {
///         AnyOf::A(_) => false,
///         AnyOf::B(_) => true,
///     }
/// }
/// # fn main() {}
/// ```
#[derive(Debug)]
pub enum AnyOf<'py, D: Dtypes, S: Shape = Dims<ANY>, L: Layout = Strided> {
    /// A tensor of the first element type.
    A(TensorView<'py, D::A, S, L>),
    /// A tensor of the second element type.
    B(TensorView<'py, D::B, S, L>),
    /// A tensor of the third element type (never, for a pair).
    C(<D::C as Third>::View<'py, S, L>),
}

/// A writable tensor argument of one of the dtypes `D`: [`AnyOf`] with [`TensorViewMut`] variants.
///
/// ```
/// use dlpack_rs::pyo3_glue::{AnyOfMut, Dims, ANY};
/// use pyo3::prelude::*;
/// #[pyfunction]
/// fn invert(image: AnyOfMut<'_, (u8, u16, f32), Dims<3, ANY, ANY, 3>>) {
///     match image {
///         AnyOfMut::A(mut v) => v.view_mut().mapv_inplace(|x| u8::MAX - x),
///         AnyOfMut::B(mut v) => v.view_mut().mapv_inplace(|x| u16::MAX - x),
///         AnyOfMut::C(mut v) => v.view_mut().mapv_inplace(|x| 1.0 - x),
///     }
/// }
/// # fn main() {}
/// ```
#[derive(Debug)]
pub enum AnyOfMut<'py, D: Dtypes, S: Shape = Dims<ANY>, L: Layout = Strided> {
    /// A tensor of the first element type.
    A(TensorViewMut<'py, D::A, S, L>),
    /// A tensor of the second element type.
    B(TensorViewMut<'py, D::B, S, L>),
    /// A tensor of the third element type (never, for a pair).
    C(<D::C as Third>::ViewMut<'py, S, L>),
}

/// The `TypeError` for a dtype outside the set `D`.
fn outside<D: Dtypes>(got: DLDataType) -> PyErr {
    let (a, b) = (<D::A as Element>::DTYPE, <D::B as Element>::DTYPE);
    match D::C::CODE {
        Some(c) => dtype_error(&[a, b, c], got),
        None => dtype_error(&[a, b], got),
    }
}

macro_rules! any_of {
    ($name:ident, $exclusive:expr, $of:ident, $third:ident) => {
        impl<'a, 'py, D: Dtypes, S: Shape, L: Layout> FromPyObject<'a, 'py>
            for $name<'py, D, S, L>
        {
            type Error = PyErr;

            #[cfg(feature = "inspect")]
            const INPUT_TYPE: pyo3::inspect::PyStaticExpr =
                crate::pyo3_glue::runtime::type_hints::SUPPORTS_DLPACK;

            fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
                let source = Source::import(&obj, $exclusive)?;
                let dtype = source.dtype();
                if dtype == <D::A as Element>::DTYPE {
                    $of::<D::A, S, L>::of(source).map($name::A)
                } else if dtype == <D::B as Element>::DTYPE {
                    $of::<D::B, S, L>::of(source).map($name::B)
                } else if D::C::CODE == Some(dtype) {
                    D::C::$third::<S, L>(source).map($name::C)
                } else {
                    Err(outside::<D>(dtype))
                }
            }
        }
    };
}
any_of!(AnyOf, false, TensorView, view);
any_of!(AnyOfMut, true, TensorViewMut, view_mut);
