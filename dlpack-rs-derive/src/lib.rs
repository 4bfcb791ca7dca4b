//! `#[derive(IntoDLPack)]` for dlpack-rs: use it through `dlpack_rs::IntoDLPack` (feature
//! `derive`), which brings both the trait and this derive.
#![deny(missing_docs)]

mod ast;
mod attr;
mod expand;
mod pymethods;
mod valid;

use proc_macro::TokenStream;

/// Derives `dlpack_rs::IntoDLPack` for a struct that owns a buffer, and, when asked, the Python
/// protocol methods of a `#[pyclass]`.
///
/// Use it as `dlpack_rs::IntoDLPack` (dlpack-rs's feature `derive`), which names both the trait
/// and this derive; its documentation there has the attributes, the examples (run as dlpack-rs's
/// doctests) and the compile errors.
#[proc_macro_derive(IntoDLPack, attributes(dlpack))]
pub fn derive_into_dlpack(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::derive(&input).into()
}

/// Use in place of pyo3's `#[pymethods]` on the `impl` block of a class that derives
/// `IntoDLPack`: the block keeps its own items and gets the DLPack protocol added.
///
/// Use it as `dlpack_rs::pymethods` (dlpack-rs's features `derive` and `pyo3`); its
/// documentation there has the example (run as dlpack-rs's doctest).
#[proc_macro_attribute]
pub fn pymethods(args: TokenStream, item: TokenStream) -> TokenStream {
    pymethods::expand(args.into(), item.into()).into()
}
