//! Checks of the parsed input that need the whole struct: one role per field kind, roles that
//! need each other, and field types that are wrong on their face.

use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Error, GenericArgument, PathArguments, Result, Type};

use crate::ast::Input;
use crate::attr::Role;

const ROLES: &[Role] = &[
    Role::Data,
    Role::Shape,
    Role::Strides,
    Role::Dtype,
    Role::Device,
    Role::ByteOffset,
];

const INTEGERS: &[&str] = &[
    "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128", "usize",
];
const NON_INTEGER_SCALARS: &[&str] = &["f32", "f64", "bool", "char", "str", "String"];
const ELEMENTS: &[&str] = &[
    "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64", "bool",
];

impl Input<'_> {
    /// Runs every check and reports all the mistakes found at once.
    pub fn validate(&self) -> Result<()> {
        let mut errors = Errors::default();
        for &role in ROLES {
            let mut with_role = self
                .fields
                .iter()
                .filter_map(|f| f.attr.filter(|a| a.role == role));
            let first = with_role.next();
            for extra in with_role {
                let mut e = Error::new(
                    extra.span,
                    format!(
                        "a second `#[dlpack({})]` field: a tensor has exactly one {}",
                        role.key(),
                        role_name(role)
                    ),
                );
                if let Some(first) = first {
                    e.combine(Error::new(first.span, "the first one is here"));
                }
                errors.push(e);
            }
        }
        if self.field(Role::Data).is_none() {
            errors.push(Error::new(
                self.ident.span(),
                format!(
                    "`{}` has no `#[dlpack(data)]` field: mark the field that holds the tensor's \
                     elements (a `Vec<T>`, `Box<[T]>`, `Arc<[T]>` or other `dlpack_rs::safe::Buffer`)",
                    self.ident
                ),
            ));
        }
        if let (Some(strides), None) = (self.field(Role::Strides), self.field(Role::Shape)) {
            let span = strides.attr.map_or(strides.ty.span(), |a| a.span);
            errors.push(Error::new(
                span,
                "`#[dlpack(strides)]` needs a `#[dlpack(shape)]` field: without one the tensor is \
                 one-dimensional over the whole buffer",
            ));
        }
        if let (Some(field), Some((span, _))) = (self.field(Role::Device), &self.attrs.device) {
            let field_span = field.attr.map_or(field.ty.span(), |a| a.span);
            let mut e = Error::new(
                field_span,
                "the device is given twice: by this `#[dlpack(device)]` field and by \
                 `#[dlpack(device = ...)]` on the struct; keep one",
            );
            e.combine(Error::new(*span, "the struct's `device` is here"));
            errors.push(e);
        }
        if let (Some(span), false) = (self.attrs.pyclass, self.generics.params.is_empty()) {
            errors.push(Error::new(
                span,
                "`#[dlpack(pyclass)]` on a generic struct: pyo3 classes cannot be generic; \
                 derive on the generic struct without `pyclass` and wrap a concrete instance in \
                 a `#[pyclass]` of its own",
            ));
        }
        if let (Some(span), Some(other)) = (self.attrs.no_pymethods, self.attrs.pyclass) {
            let mut e = Error::new(
                span,
                "`no_pymethods` (you write the protocol methods) and `pyclass` (the derive adds \
                 them) contradict each other: keep one",
            );
            e.combine(Error::new(other, "`pyclass` is here"));
            errors.push(e);
        }
        for field in &self.fields {
            if let Some(attr) = field.attr {
                if let Err(e) = check_type(attr.role, field.ty) {
                    errors.push(e);
                }
            }
        }
        errors.finish()
    }
}

#[derive(Default)]
struct Errors(Option<Error>);

impl Errors {
    fn push(&mut self, e: Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
    fn finish(self) -> Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Data => "data buffer",
        Role::Shape => "shape",
        Role::Strides => "set of strides",
        Role::Dtype => "dtype",
        Role::Device => "device",
        Role::ByteOffset => "byte offset",
    }
}

/// The last path segment's name, when the type is a plain path.
fn last_ident(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.to_string()),
        Type::Group(g) => last_ident(&g.elem),
        Type::Paren(p) => last_ident(&p.elem),
        _ => None,
    }
}

/// The element type of `Vec<X>`, `Box<[X]>`, `Arc<[X]>`, `Rc<[X]>`, `[X; N]`, `&[X]`,
/// `Option<...>` of those (strides), and whether an `Option` was peeled.
fn element_of(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Array(a) => Some(&a.elem),
        Type::Slice(s) => Some(&s.elem),
        Type::Reference(r) => element_of(&r.elem),
        Type::Group(g) => element_of(&g.elem),
        Type::Paren(p) => element_of(&p.elem),
        Type::Path(p) if p.qself.is_none() => {
            let seg = p.path.segments.last()?;
            let PathArguments::AngleBracketed(args) = &seg.arguments else {
                return None;
            };
            let Some(GenericArgument::Type(arg)) = args.args.first() else {
                return None;
            };
            match seg.ident.to_string().as_str() {
                "Vec" => Some(arg),
                "Box" | "Arc" | "Rc" => match arg {
                    Type::Slice(s) => Some(&s.elem),
                    _ => None,
                },
                _ => None,
            }
        }
        _ => None,
    }
}

fn option_inner(ty: &Type) -> Option<&Type> {
    let Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != "Option" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    match args.args.first() {
        Some(GenericArgument::Type(t)) => Some(t),
        _ => None,
    }
}

fn show(ty: &Type) -> String {
    ty.to_token_stream()
        .to_string()
        .replace(" < ", "<")
        .replace(" >", ">")
        .replace("< ", "<")
        .replace(" ;", ";")
        .replace("[ ", "[")
        .replace(" ]", "]")
}

fn check_type(role: Role, ty: &Type) -> Result<()> {
    let name = last_ident(ty);
    let scalar = name
        .as_deref()
        .filter(|n| INTEGERS.contains(n) || NON_INTEGER_SCALARS.contains(n));
    match role {
        Role::Data => {
            if let Some(n) = scalar {
                return Err(Error::new(
                    ty.span(),
                    format!(
                        "`#[dlpack(data)]` must be a buffer of elements, not `{n}`: use `Vec<T>`, \
                         `Box<[T]>`, `Arc<[T]>` or a type implementing `dlpack_rs::safe::Buffer`"
                    ),
                ));
            }
            if let Type::Array(_) = ty {
                return Err(Error::new(
                    ty.span(),
                    "`#[dlpack(data)]` cannot be an inline array: it moves with the struct, so an \
                     exported pointer to it would dangle; use `Vec<T>` or `Box<[T]>`",
                ));
            }
            if let Type::Tuple(_) = ty {
                return Err(Error::new(
                    ty.span(),
                    "`#[dlpack(data)]` must be a buffer of elements, not a tuple",
                ));
            }
            if let Some(elem) = element_of(ty) {
                if let Some(n) = last_ident(elem) {
                    if (INTEGERS.contains(&n.as_str()) || NON_INTEGER_SCALARS.contains(&n.as_str()))
                        && !ELEMENTS.contains(&n.as_str())
                    {
                        let hint = match n.as_str() {
                            "usize" => "; use `u64` (or `u32`)",
                            "isize" => "; use `i64` (or `i32`)",
                            _ => "",
                        };
                        return Err(Error::new(
                            elem.span(),
                            format!(
                                "`{n}` is not a DLPack element type (it has no fixed dtype){hint}"
                            ),
                        ));
                    }
                }
            }
            Ok(())
        }
        Role::Shape | Role::Strides => {
            let key = role.key();
            let ty = match (role, option_inner(ty)) {
                (Role::Strides, Some(inner)) => inner,
                _ => ty,
            };
            let name = last_ident(ty);
            if let Some(n) = name
                .as_deref()
                .filter(|n| INTEGERS.contains(n) || NON_INTEGER_SCALARS.contains(n))
            {
                return Err(Error::new(
                    ty.span(),
                    format!(
                        "`#[dlpack({key})]` must be a list of integers, not `{n}`: use `Vec<i64>`, \
                         `Vec<usize>`, `[usize; N]` or `Box<[i64]>`"
                    ),
                ));
            }
            if let Some(elem) = element_of(ty) {
                if let Some(n) = last_ident(elem) {
                    if NON_INTEGER_SCALARS.contains(&n.as_str()) || n == "i128" || n == "u128" {
                        return Err(Error::new(
                            elem.span(),
                            format!(
                                "`#[dlpack({key})]` elements must be integers (`i64`, `i32`, `isize`, \
                                 `usize`, `u32` or `u64`), not `{n}`"
                            ),
                        ));
                    }
                }
            }
            Ok(())
        }
        Role::Dtype | Role::Device => {
            let (key, want) = if role == Role::Dtype {
                ("dtype", "DLDataType")
            } else {
                ("device", "DLDevice")
            };
            let obviously_wrong = scalar.is_some()
                || element_of(ty).is_some()
                || matches!(ty, Type::Tuple(_) | Type::Array(_) | Type::Slice(_));
            if obviously_wrong {
                return Err(Error::new(
                    ty.span(),
                    format!(
                        "`#[dlpack({key})]` must be of type `dlpack_rs::ffi::{want}`, not `{}`",
                        show(ty)
                    ),
                ));
            }
            Ok(())
        }
        Role::ByteOffset => {
            let signed = ["i8", "i16", "i32", "i64", "i128", "isize"];
            let wrong = name
                .as_deref()
                .is_some_and(|n| NON_INTEGER_SCALARS.contains(&n) || signed.contains(&n))
                || element_of(ty).is_some()
                || matches!(ty, Type::Tuple(_) | Type::Array(_) | Type::Slice(_));
            if wrong {
                return Err(Error::new(
                    ty.span(),
                    format!(
                        "`#[dlpack(byte_offset)]` must be an unsigned integer (`u64`, `usize`, \
                         `u32`), not `{}`",
                        show(ty)
                    ),
                ));
            }
            Ok(())
        }
    }
}
