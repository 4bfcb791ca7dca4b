//! The derive input, read into the shape the rest of the macro works with.

use proc_macro2::Span;
use syn::{Data, DeriveInput, Error, Fields, Generics, Ident, Member, Result, Type};

use crate::attr::{self, ContainerAttrs, FieldAttr};

/// A struct with `#[derive(IntoDLPack)]`.
pub struct Input<'a> {
    pub ident: &'a Ident,
    pub generics: &'a Generics,
    pub attrs: ContainerAttrs,
    pub fields: Vec<Field<'a>>,
}

/// One field of it.
pub struct Field<'a> {
    pub member: Member,
    pub ty: &'a Type,
    pub attr: Option<FieldAttr>,
}

impl<'a> Input<'a> {
    /// Reads the struct and its attributes; enums and unions are refused here.
    pub fn from_syn(input: &'a DeriveInput) -> Result<Self> {
        let data =
            match &input.data {
                Data::Struct(data) => data,
                Data::Enum(data) => return Err(Error::new(
                    data.enum_token.span,
                    "`IntoDLPack` cannot be derived for an enum: a tensor is one buffer plus its \
                     metadata, so derive it on a struct",
                )),
                Data::Union(data) => {
                    return Err(Error::new(
                        data.union_token.span,
                        "`IntoDLPack` cannot be derived for a union: derive it on a struct",
                    ))
                }
            };
        let attrs = attr::container_attrs(&input.attrs)?;
        let mut fields = Vec::new();
        let mut errors: Option<Error> = None;
        let members: Vec<(Member, &syn::Field)> = match &data.fields {
            Fields::Named(named) => named
                .named
                .iter()
                .map(|f| (Member::Named(f.ident.clone().expect("named field")), f))
                .collect(),
            Fields::Unnamed(unnamed) => unnamed
                .unnamed
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    (
                        Member::Unnamed(syn::Index {
                            index: i as u32,
                            span: Span::call_site(),
                        }),
                        f,
                    )
                })
                .collect(),
            Fields::Unit => Vec::new(),
        };
        for (member, field) in members {
            match attr::field_attr(&field.attrs) {
                Ok(attr) => fields.push(Field {
                    member,
                    ty: &field.ty,
                    attr,
                }),
                Err(e) => match &mut errors {
                    Some(all) => all.combine(e),
                    None => errors = Some(e),
                },
            }
        }
        if let Some(e) = errors {
            return Err(e);
        }
        Ok(Input {
            ident: &input.ident,
            generics: &input.generics,
            attrs,
            fields,
        })
    }

    /// The field with `role`, if any (validation has made it unique).
    pub fn field(&self, role: attr::Role) -> Option<&Field<'a>> {
        self.fields
            .iter()
            .find(|f| f.attr.is_some_and(|a| a.role == role))
    }
}
