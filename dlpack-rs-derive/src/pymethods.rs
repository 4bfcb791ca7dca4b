//! `#[dlpack_rs::pymethods]`: a class's own `#[pymethods]` block, with the DLPack protocol
//! methods added to it.

use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::spanned::Spanned;
use syn::{Error, ImplItem, ItemImpl};

/// The protocol items the attribute adds; a block that defines one itself is refused.
const PROTOCOL: &[&str] = &[
    "__dlpack__",
    "__dlpack_device__",
    "__dlpack_c_exchange_api__",
];

pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut block: ItemImpl = match syn::parse2(item.clone()) {
        Ok(block) => block,
        Err(_) => {
            let e = Error::new_spanned(
                &item,
                "`#[dlpack_rs::pymethods]` goes on a class's `impl` block, in place of \
                 `#[pymethods]`",
            );
            return e.into_compile_error();
        }
    };
    let mut errors: Vec<Error> = Vec::new();
    if !args.is_empty() {
        errors.push(Error::new_spanned(
            &args,
            "`#[dlpack_rs::pymethods]` takes no arguments",
        ));
    }
    if let Some((_, path, _)) = &block.trait_ {
        let e = Error::new_spanned(
            path,
            "`#[dlpack_rs::pymethods]` goes on the class's inherent `impl` block (the one \
             `#[pymethods]` would go on), not on a trait impl",
        );
        let e = e.into_compile_error();
        return quote!(#e #block);
    }
    if !block.generics.params.is_empty() {
        errors.push(Error::new(
            block.generics.span(),
            "pyo3 classes cannot be generic, so neither can their `#[dlpack_rs::pymethods]` block",
        ));
    }
    // `#[pymethods]` as well: the block would get two pyo3 expansions.
    block.attrs.retain(|attr| {
        let is_pymethods = attr
            .path()
            .segments
            .last()
            .is_some_and(|s| s.ident == "pymethods");
        if is_pymethods {
            errors.push(Error::new_spanned(
                attr,
                "`#[dlpack_rs::pymethods]` replaces `#[pymethods]`: remove this one",
            ));
        }
        !is_pymethods
    });
    block.items.retain(|item| {
        let (attrs, ident) = match item {
            ImplItem::Fn(f) => (&f.attrs[..], Some(f.sig.ident.to_string())),
            ImplItem::Const(c) => (&c.attrs[..], Some(c.ident.to_string())),
            _ => (&[][..], None),
        };
        // The Python name: `#[pyo3(name = "...")]` if given, else the Rust one.
        let renamed = attrs
            .iter()
            .filter(|a| a.path().is_ident("pyo3"))
            .find_map(|a| {
                let text = a.meta.to_token_stream().to_string().replace(' ', "");
                PROTOCOL
                    .iter()
                    .find(|p| text.contains(&format!("name=\"{p}\"")))
                    .map(|p| p.to_string())
            });
        let name = renamed.or(ident);
        match name {
            Some(name) if PROTOCOL.contains(&name.as_str()) => {
                let span = match item {
                    ImplItem::Fn(f) => f.sig.ident.span(),
                    ImplItem::Const(c) => c.ident.span(),
                    _ => item.span(),
                };
                errors.push(Error::new(
                    span,
                    format!(
                        "`#[dlpack_rs::pymethods]` adds `{name}` itself: remove this one (or use \
                         pyo3's `#[pymethods]` to write the protocol by hand)"
                    ),
                ));
                false
            }
            _ => true,
        }
    });
    let attrs = &block.attrs;
    let cfgs: Vec<_> = attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg") || a.path().is_ident("cfg_attr"))
        .collect();
    let self_ty = &block.self_ty;
    let items = &block.items;
    let expanded = quote! {
        ::dlpack_rs::__dlpack_pymethods! { [#(#attrs)*] cfg[#(#cfgs)*] #self_ty { #(#items)* } }
    };
    let mut out = TokenStream::new();
    for e in errors {
        e.into_compile_error().to_tokens(&mut out);
    }
    expanded.to_tokens(&mut out);
    out
}
