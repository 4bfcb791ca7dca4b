//! `#[derive(IntoDLPack)]` and `#[dlpack_rs::pymethods]` for dlpack-rs. Use them through
//! `dlpack_rs::IntoDLPack` (feature `derive`, which brings both the trait and the derive) and
//! `dlpack_rs::pymethods` (features `derive` and `pyo3`), where they are documented with their
//! attributes, examples and compile errors.
#![deny(missing_docs)]

mod ast;
mod attr;
mod expand;
mod pymethods;
mod valid;

use proc_macro::TokenStream;

// Documented where users meet it, on dlpack-rs's re-export (`dlpack_rs::IntoDLPack`, whose
// examples run as dlpack-rs's doctests); rustdoc would append any text here to that page.
#[allow(missing_docs)]
#[proc_macro_derive(IntoDLPack, attributes(dlpack))]
pub fn derive_into_dlpack(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::derive(&input).into()
}

// Documented on dlpack-rs's re-export (`dlpack_rs::pymethods`), as the derive is.
#[allow(missing_docs)]
#[proc_macro_attribute]
pub fn pymethods(args: TokenStream, item: TokenStream) -> TokenStream {
    pymethods::expand(args.into(), item.into()).into()
}
