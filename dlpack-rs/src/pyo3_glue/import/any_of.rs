//! Typed arguments of one of several element types: [`AnyOf2`] / [`AnyOf3`] (read-only) and
//! [`AnyOf2Mut`] / [`AnyOf3Mut`] (writable), each variant a [`TensorView`] / [`TensorViewMut`].

use pyo3::prelude::*;
use pyo3::Borrowed;

use crate::pyo3_glue::import::constraints::{Layout, Ndim, Shape, Strided, ANY};
use crate::pyo3_glue::import::source::{dtype_error, Source};
use crate::pyo3_glue::import::typed::{view_mut_of, view_of, TensorView, TensorViewMut};
use crate::safe::AnyBitPattern;

macro_rules! any_of {
    ($(#[$doc:meta])* $name:ident { $($v:ident),* }) => {
        any_of!(@ $(#[$doc])* $name { $($v),* } TensorView, false, view_of);
    };
    ($(#[$doc:meta])* mut $name:ident { $($v:ident),* }) => {
        any_of!(@ $(#[$doc])* $name { $($v),* } TensorViewMut, true, view_mut_of);
    };
    (@ $(#[$doc:meta])* $name:ident { $($v:ident),* } $view:ident, $exclusive:expr, $of:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $name<$($v: AnyBitPattern),*, S: Shape = Ndim<ANY>, L: Layout = Strided> {
            $(
                #[doc = concat!("A tensor of the element type `", stringify!($v), "`.")]
                $v($view<$v, S, L>),
            )*
        }

        impl<'a, 'py, $($v: AnyBitPattern),*, S: Shape, L: Layout> FromPyObject<'a, 'py>
            for $name<$($v),*, S, L>
        {
            type Error = PyErr;

            #[cfg(feature = "inspect")]
            const INPUT_TYPE: pyo3::inspect::PyStaticExpr = crate::pyo3_glue::runtime::type_hints::SUPPORTS_DLPACK;

            fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
                let source = Source::import(&obj, $exclusive)?;
                let dtype = source.dtype();
                $(
                    if dtype == $v::DTYPE {
                        return $of::<$v, S, L>(source).map($name::$v);
                    }
                )*
                Err(dtype_error(&[$($v::DTYPE),*], dtype))
            }
        }
    };
}

any_of! {
    /// A read-only tensor argument of element type `A` or `B`; the variant says which came.
    /// Any other dtype raises `TypeError` (`expected a tensor of uint8 or float32, got int64`).
    AnyOf2 { A, B }
}

any_of! {
    /// A read-only tensor argument of one of three element types; the variant says which came.
    /// Any other dtype raises `TypeError` naming all three.
    ///
    /// ```
    /// use dlpack_rs::pyo3_glue::{AnyOf3, Shape3, ANY};
    /// use pyo3::prelude::*;
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
    /// A writable tensor argument of element type `A` or `B`: [`AnyOf2`] with [`TensorViewMut`]
    /// variants (exclusive borrow, writable memory, no element addressed twice).
    mut AnyOf2Mut { A, B }
}

any_of! {
    /// A writable tensor argument of one of three element types: [`AnyOf3`] with
    /// [`TensorViewMut`] variants.
    ///
    /// ```
    /// use dlpack_rs::pyo3_glue::{AnyOf3Mut, Shape3, ANY};
    /// use pyo3::prelude::*;
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
