//! `#[derive(IntoDLPack)]` for dlpack-rs: use it through `dlpack_rs::IntoDLPack` (feature
//! `derive`), which brings both the trait and this derive.
#![deny(missing_docs)]

mod ast;
mod attr;
mod expand;
mod valid;

use proc_macro::TokenStream;

/// Derives `dlpack_rs::IntoDLPack` (DOCS BELOW ARE FILLED IN).
#[proc_macro_derive(IntoDLPack, attributes(dlpack))]
pub fn derive_into_dlpack(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
