//! Parsing of `#[dlpack(...)]` attributes, on the struct and on its fields.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;
use syn::{Attribute, Error, Expr, Ident, Lit, LitStr, Result};

/// Keys accepted on a field, one role each.
pub const FIELD_KEYS: &[&str] = &["data", "shape", "strides", "dtype", "device", "byte_offset"];
/// Keys accepted on the struct.
pub const CONTAINER_KEYS: &[&str] = &[
    "read_only",
    "device",
    "pyclass",
    "no_pymethods",
    "legacy_read_only",
];

/// What a field is to the tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Data,
    Shape,
    Strides,
    Dtype,
    Device,
    ByteOffset,
}

impl Role {
    fn from_key(key: &str) -> Option<Role> {
        Some(match key {
            "data" => Role::Data,
            "shape" => Role::Shape,
            "strides" => Role::Strides,
            "dtype" => Role::Dtype,
            "device" => Role::Device,
            "byte_offset" => Role::ByteOffset,
            _ => return None,
        })
    }

    /// The attribute key, as written.
    pub fn key(self) -> &'static str {
        match self {
            Role::Data => "data",
            Role::Shape => "shape",
            Role::Strides => "strides",
            Role::Dtype => "dtype",
            Role::Device => "device",
            Role::ByteOffset => "byte_offset",
        }
    }
}

/// A field's role and the span of the key that gave it.
#[derive(Clone, Copy)]
pub struct FieldAttr {
    pub role: Role,
    pub span: Span,
}

/// The fixed device a struct declares with `#[dlpack(device = ...)]`.
pub enum DeviceSpec {
    /// `device = "cuda:1"`: resolved at compile time by `DLDeviceType::from_short_name`.
    Named {
        /// The device type's name, resolved by `DLDeviceType::from_short_name` at compile time
        /// (the ABI's table in `dlpack_rs::ffi` is the only list of device types).
        device_type: String,
        device_id: i32,
        span: Span,
    },
    /// `device = some::CONST` or any other expression of type `DLDevice`.
    Expr(Box<Expr>),
}

/// Struct-level settings.
#[derive(Default)]
pub struct ContainerAttrs {
    pub read_only: Option<Span>,
    pub device: Option<(Span, DeviceSpec)>,
    pub pyclass: Option<Span>,
    pub no_pymethods: Option<Span>,
    /// `legacy_read_only = "share"` (true) or `"copy"` (false, the default written out).
    pub legacy_read_only: Option<(Span, bool)>,
}

/// Reads the `#[dlpack(...)]` attributes of the struct.
pub fn container_attrs(attrs: &[Attribute]) -> Result<ContainerAttrs> {
    let mut out = ContainerAttrs::default();
    for attr in dlpack_attrs(attrs)? {
        attr.parse_nested_meta(|meta| {
            let ident = key_ident(&meta.path)?;
            let key = ident.to_string();
            let span = ident.span();
            match key.as_str() {
                "read_only" => {
                    no_value(&meta, &key)?;
                    set_once(&mut out.read_only, span, &key)
                }
                "pyclass" => {
                    no_value(&meta, &key)?;
                    set_once(&mut out.pyclass, span, &key)
                }
                "no_pymethods" => {
                    no_value(&meta, &key)?;
                    set_once(&mut out.no_pymethods, span, &key)
                }
                "legacy_read_only" => {
                    let value_error = || {
                        Error::new(
                            span,
                            "`legacy_read_only` takes a value: `#[dlpack(legacy_read_only = \"share\")]` \
                             (a legacy request of read-only data shares the memory, trusting the \
                             consumer not to write it) or `\"copy\"` (the default)",
                        )
                    };
                    if meta.input.is_empty() || meta.input.peek(syn::Token![,]) {
                        return Err(value_error());
                    }
                    let lit: LitStr = meta.value()?.parse().map_err(|_| value_error())?;
                    let share = match lit.value().as_str() {
                        "share" => true,
                        "copy" => false,
                        _ => return Err(Error::new(lit.span(), value_error().to_string())),
                    };
                    if out.legacy_read_only.is_some() {
                        return Err(duplicate(span, &key));
                    }
                    out.legacy_read_only = Some((span, share));
                    Ok(())
                }
                "device" => {
                    if meta.input.is_empty() || meta.input.peek(syn::Token![,]) {
                        return Err(Error::new(
                            span,
                            "`device` on the struct needs a value: `#[dlpack(device = \"cuda:0\")]`; \
                             to take the device from a field, put `#[dlpack(device)]` on that field",
                        ));
                    }
                    let expr: Expr = meta.value()?.parse()?;
                    let spec = device_spec(expr)?;
                    if out.device.is_some() {
                        return Err(duplicate(span, &key));
                    }
                    out.device = Some((span, spec));
                    Ok(())
                }
                _ if Role::from_key(&key).is_some() => Err(Error::new(
                    span,
                    format!(
                        "`{key}` is a field attribute: put `#[dlpack({key})]` on the field that holds the {}",
                        role_noun(&key)
                    ),
                )),
                _ => Err(unknown(span, &key, CONTAINER_KEYS, "on a struct")),
            }
        })?;
    }
    Ok(out)
}

/// Reads the `#[dlpack(...)]` attributes of one field: at most one role.
pub fn field_attr(attrs: &[Attribute]) -> Result<Option<FieldAttr>> {
    let mut out: Option<FieldAttr> = None;
    for attr in dlpack_attrs(attrs)? {
        attr.parse_nested_meta(|meta| {
            let ident = key_ident(&meta.path)?;
            let key = ident.to_string();
            let span = ident.span();
            let Some(role) = Role::from_key(&key) else {
                if CONTAINER_KEYS.contains(&key.as_str()) {
                    return Err(Error::new(
                        span,
                        format!("`{key}` is a struct attribute: put `#[dlpack({key})]` on the struct, not on a field"),
                    ));
                }
                return Err(unknown(span, &key, FIELD_KEYS, "on a field"));
            };
            no_value(&meta, &key)?;
            match out {
                Some(prev) if prev.role == role => Err(duplicate(span, &key)),
                Some(prev) => Err(Error::new(
                    span,
                    format!(
                        "a field has one role: this one is already `{}`, so it cannot also be `{key}`",
                        prev.role.key()
                    ),
                )),
                None => {
                    out = Some(FieldAttr { role, span });
                    Ok(())
                }
            }
        })?;
    }
    Ok(out)
}

/// The `dlpack` attributes, each checked to be of the list form.
fn dlpack_attrs(attrs: &[Attribute]) -> Result<Vec<&Attribute>> {
    let mut out = Vec::new();
    for attr in attrs {
        if !attr.path().is_ident("dlpack") {
            continue;
        }
        match &attr.meta {
            syn::Meta::List(list) if list.tokens.is_empty() => {
                return Err(Error::new(
                    list.delimiter.span().join(),
                    "empty `#[dlpack()]`: name a key, for example `#[dlpack(data)]`",
                ))
            }
            syn::Meta::List(_) => out.push(attr),
            other => {
                return Err(Error::new(
                    other.span(),
                    "expected `#[dlpack(...)]`, for example `#[dlpack(data)]` or `#[dlpack(read_only)]`",
                ))
            }
        }
    }
    Ok(out)
}

fn key_ident(path: &syn::Path) -> Result<&Ident> {
    path.get_ident().ok_or_else(|| {
        Error::new(
            path.span(),
            "expected a single key, such as `data` or `shape`",
        )
    })
}

fn no_value(meta: &syn::meta::ParseNestedMeta<'_>, key: &str) -> Result<()> {
    if meta.input.peek(syn::Token![=]) || meta.input.peek(syn::token::Paren) {
        return Err(Error::new(
            meta.input.span(),
            format!("`{key}` takes no value: write `#[dlpack({key})]`"),
        ));
    }
    Ok(())
}

fn set_once(slot: &mut Option<Span>, span: Span, key: &str) -> Result<()> {
    if slot.is_some() {
        return Err(duplicate(span, key));
    }
    *slot = Some(span);
    Ok(())
}

fn duplicate(span: Span, key: &str) -> Error {
    Error::new(span, format!("duplicate `{key}` attribute"))
}

fn role_noun(key: &str) -> &'static str {
    match key {
        "data" => "buffer",
        "shape" => "shape",
        "strides" => "strides",
        "dtype" => "element type (`DLDataType`)",
        "device" => "device (`DLDevice`)",
        _ => "byte offset",
    }
}

fn unknown(span: Span, key: &str, expected: &[&str], place: &str) -> Error {
    let list = expected
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut msg = format!("unknown `dlpack` attribute `{key}` {place}");
    let all = FIELD_KEYS.iter().chain(CONTAINER_KEYS);
    if let Some(best) = closest(key, all.copied()) {
        msg.push_str(&format!("; did you mean `{best}`?"));
    }
    msg.push_str(&format!(" (expected one of {list})"));
    Error::new(span, msg)
}

/// The candidate nearest to `key`, if it is near enough to be a misspelling.
fn closest<'a>(key: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let key = key.to_ascii_lowercase();
    candidates
        .map(|c| (edit_distance(&key, c), c))
        .filter(|&(d, c)| d <= (c.len().max(key.len()) / 3).max(1))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Levenshtein distance, counting a swap of two neighbours as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

fn device_spec(mut expr: Expr) -> Result<DeviceSpec> {
    // A string passed through a `macro_rules!` fragment arrives in an invisible group.
    while let Expr::Group(group) = expr {
        expr = *group.expr;
    }
    if let Expr::Lit(syn::ExprLit {
        lit: Lit::Str(s), ..
    }) = &expr
    {
        return parse_device_str(s);
    }
    if let Expr::Lit(lit) = &expr {
        return Err(Error::new(
            lit.span(),
            "expected a device string such as `\"cpu\"` or `\"cuda:0\"`, or a `DLDevice` expression",
        ));
    }
    Ok(DeviceSpec::Expr(Box::new(expr)))
}

fn parse_device_str(s: &LitStr) -> Result<DeviceSpec> {
    let value = s.value();
    let (name, index) = match value.split_once(':') {
        Some((name, index)) => (name, Some(index)),
        None => (value.as_str(), None),
    };
    let device_type = name.trim().to_owned();
    let device_id = match index {
        None => 0,
        Some(index) => index.trim().parse::<i32>().ok().filter(|i| *i >= 0).ok_or_else(|| {
            Error::new(
                s.span(),
                format!("bad device index `{index}`: expected a non-negative integer, as in `\"cuda:0\"`"),
            )
        })?,
    };
    Ok(DeviceSpec::Named {
        device_type,
        device_id,
        span: s.span(),
    })
}

impl DeviceSpec {
    /// An expression of type `DLDevice`.
    pub fn to_tokens(&self) -> TokenStream {
        match self {
            DeviceSpec::Named {
                device_type,
                device_id,
                span,
            } => {
                let msg = format!(
                    "unknown device `{device_type}`: write a `DLDeviceType` constant's name in \
                     lower case, with `:<index>` if not 0, as `\"cpu\"` or `\"cuda:0\"`"
                );
                quote::quote_spanned! {*span=>
                    {
                        const DEVICE: ::dlpack_rs::ffi::DLDevice =
                            match ::dlpack_rs::ffi::DLDeviceType::from_short_name(#device_type) {
                                ::core::option::Option::Some(t) => {
                                    ::dlpack_rs::ffi::DLDevice::new(t, #device_id)
                                }
                                ::core::option::Option::None => ::core::panic!(#msg),
                            };
                        DEVICE
                    }
                }
            }
            DeviceSpec::Expr(expr) => {
                let span = expr.span();
                quote::quote_spanned! {span=>
                    ::dlpack_rs::__private_derive_v0_4::device_value(#expr)
                }
            }
        }
    }
}
