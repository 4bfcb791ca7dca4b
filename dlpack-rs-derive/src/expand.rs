//! Code generation: the `IntoDLPack` impl and the call of the `#[pymethods]` hook.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{DeriveInput, Member};

use crate::ast::{Field, Input};
use crate::attr::Role;

/// Parses, validates, generates. After an error, the errors and a stub impl, so that uses of
/// the struct add no "does not implement `IntoDLPack`" cascade.
pub fn derive(input: &DeriveInput) -> TokenStream {
    let result = Input::from_syn(input).and_then(|parsed| {
        parsed.validate()?;
        Ok(expand(&parsed))
    });
    match result {
        Ok(tokens) => tokens,
        Err(e) => {
            let error = e.into_compile_error();
            let stub = fallback(input);
            quote!(#error #stub)
        }
    }
}

fn fallback(input: &DeriveInput) -> TokenStream {
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        // SAFETY: never compiled into a program: the derive reported an error above.
        #[automatically_derived]
        unsafe impl #impl_generics ::dlpack_rs::IntoDLPack for #ident #ty_generics #where_clause {
            fn tensor_info(&self) -> ::dlpack_rs::safe::TensorInfo {
                ::core::unreachable!("#[derive(IntoDLPack)] reported an error")
            }
        }
    }
}

fn access(field: &Field<'_>) -> TokenStream {
    let member = &field.member;
    quote!(&self.#member)
}

fn member_name(member: &Member) -> String {
    match member {
        Member::Named(ident) => ident.to_string(),
        Member::Unnamed(index) => index.index.to_string(),
    }
}

/// `<Ty as Trait>::method(&self.field)`, spanned at the field's type, where a misfit is reported.
fn role_call(field: &Field<'_>, trait_name: &str, method: &str) -> TokenStream {
    let ty = field.ty;
    let trait_ident = syn::Ident::new(trait_name, ty.span());
    let method = syn::Ident::new(method, ty.span());
    let value = access(field);
    quote_spanned! {ty.span()=>
        <#ty as ::dlpack_rs::__private_derive_v0_4::#trait_ident>::#method(#value)
    }
}

fn expand(input: &Input<'_>) -> TokenStream {
    let ident = input.ident;
    let data = input.field(Role::Data).expect("validated: one data field");
    let data_ty = data.ty;
    let data_value = access(data);
    let data_expr = quote_spanned! {data_ty.span()=>
        ::dlpack_rs::__private_derive_v0_4::data_field::<#data_ty>(#data_value)
    };

    let dtype = match input.field(Role::Dtype) {
        Some(f) => role_call(f, "DtypeField", "dtype"),
        None => quote!(::dlpack_rs::__private_derive_v0_4::element_dtype(
            __dlpack_data
        )),
    };
    let device = match (input.field(Role::Device), &input.attrs.device) {
        (Some(f), _) => role_call(f, "DeviceField", "device"),
        (None, Some((_, spec))) => spec.to_tokens(),
        // The buffer's own device, as the reference table says.
        (None, None) => quote!(::dlpack_rs::safe::Buffer::device(__dlpack_data)),
    };
    let shape = match input.field(Role::Shape) {
        Some(f) => role_call(f, "ShapeField", "dims"),
        None => quote!(::dlpack_rs::__private_derive_v0_4::whole_buffer_shape(
            __dlpack_data,
            __dlpack_dtype
        )),
    };
    let strides = match input.field(Role::Strides) {
        Some(f) => role_call(f, "StridesField", "strides"),
        None => quote!(::core::option::Option::None),
    };
    let byte_offset = match input.field(Role::ByteOffset) {
        Some(f) => role_call(f, "ByteOffsetField", "byte_offset"),
        None => quote!(0u64),
    };
    let read_only = input.attrs.read_only.is_some();
    let share_legacy = matches!(input.attrs.legacy_read_only, Some((_, true)));
    let type_name = ident.to_string();
    let field_name = member_name(&data.member);

    // Each role field's type bound by its trait: generic structs need no bounds of their own,
    // and a misfit gets one error, at the field's type.
    let mut generics = input.generics.clone();
    {
        let where_clause = generics.make_where_clause();
        for field in &input.fields {
            let Some(attr) = field.attr else { continue };
            let ty = field.ty;
            let span = ty.span();
            let bound = match attr.role {
                Role::Data => quote_spanned!(span=> ::dlpack_rs::safe::Buffer),
                Role::Shape => {
                    quote_spanned!(span=> ::dlpack_rs::__private_derive_v0_4::ShapeField)
                }
                Role::Strides => {
                    quote_spanned!(span=> ::dlpack_rs::__private_derive_v0_4::StridesField)
                }
                Role::Dtype => {
                    quote_spanned!(span=> ::dlpack_rs::__private_derive_v0_4::DtypeField)
                }
                Role::Device => {
                    quote_spanned!(span=> ::dlpack_rs::__private_derive_v0_4::DeviceField)
                }
                Role::ByteOffset => {
                    quote_spanned!(span=> ::dlpack_rs::__private_derive_v0_4::ByteOffsetField)
                }
            };
            where_clause
                .predicates
                .push(syn::parse_quote_spanned!(ty.span()=> #ty: #bound));
        }
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();

    let imp = quote! {
        // SAFETY: the data field is a `Buffer` (which vouches for its memory and device), read
        // through `Buffer::data_ptr`; `within_buffer_extent` checks the device and that every
        // byte addressed lies inside it; writes only where `consumers_may_write` allows.
        #[automatically_derived]
        unsafe impl #impl_generics ::dlpack_rs::IntoDLPack for #ident #ty_generics #where_clause {
            fn tensor_info(&self) -> ::dlpack_rs::safe::TensorInfo {
                // Fully qualified: an inherent method of that name must not stand in for it.
                ::dlpack_rs::__private_derive_v0_4::expect_within(
                    <Self as ::dlpack_rs::IntoDLPack>::__tensor_info_with_extent(self),
                )
            }

            fn __tensor_info_with_extent(
                &self,
            ) -> ::core::result::Result<
                (
                    ::dlpack_rs::safe::TensorInfo,
                    ::core::option::Option<::dlpack_rs::__private_derive_v0_4::Extent>,
                ),
                ::dlpack_rs::safe::Error,
            > {
                let __dlpack_data = #data_expr;
                let __dlpack_dtype: ::dlpack_rs::ffi::DLDataType = #dtype;
                let __dlpack_info = ::dlpack_rs::safe::TensorInfo {
                    data: ::dlpack_rs::__private_derive_v0_4::data_ptr(__dlpack_data),
                    device: #device,
                    dtype: __dlpack_dtype,
                    shape: #shape,
                    strides: #strides,
                    byte_offset: #byte_offset,
                };
                ::dlpack_rs::__private_derive_v0_4::within_buffer_extent(
                    __dlpack_data,
                    __dlpack_info,
                    #type_name,
                    #field_name,
                )
            }

            fn __data_ptr(&self) -> *mut ::core::ffi::c_void {
                ::dlpack_rs::__private_derive_v0_4::data_ptr(#data_expr)
            }

            fn is_read_only(&self) -> bool {
                #read_only || !::dlpack_rs::__private_derive_v0_4::consumers_may_write(#data_value)
            }

            fn share_read_only_legacy(&self) -> bool {
                #share_legacy
            }

            fn rust_access_registered(&self) -> bool {
                ::dlpack_rs::__private_derive_v0_4::registry_guarded(#data_value)
            }

            fn stream_order(
                &self,
            ) -> ::core::option::Option<
                ::dlpack_rs::__private_derive_v0_4::Arc<dyn ::dlpack_rs::safe::StreamOrder>,
            > {
                ::dlpack_rs::safe::Buffer::stream_order(#data_expr)
            }
        }
    };
    let data_member = &data.member;
    let derived = quote! {
        // SAFETY: every export checks that `tensor_info` stays inside this field, on its device.
        #[automatically_derived]
        unsafe impl #impl_generics ::dlpack_rs::__private_derive_v0_4::DerivedData
            for #ident #ty_generics #where_clause
        {
            type Data = #data_ty;
            fn data_field(&self) -> &#data_ty {
                &self.#data_member
            }
        }
    };
    // Python methods only when asked (validation refused `pyclass` on a generic struct).
    let hook = match (input.attrs.pyclass, input.attrs.no_pymethods) {
        (Some(span), _) => quote_spanned! {span=>
            ::dlpack_rs::__dlpack_pymethods! { @derive #ident }
        },
        // The class writes the protocol itself: nothing to add, nothing to check.
        (None, Some(span)) => quote_spanned! {span=>
            impl ::dlpack_rs::__private_derive_v0_4::Use_either_dlpack_pyclass_or_dlpack_rs_pymethods_not_both for #ident {}
        },
        // A `#[pyclass]` given neither is refused at compile time (plain structs pass).
        (None, None) if input.generics.params.is_empty() => quote! {
            ::dlpack_rs::__dlpack_check_methods!(#ident, #type_name);
        },
        (None, None) => TokenStream::new(),
    };
    quote! {
        #imp
        #derived
        #hook
    }
}
