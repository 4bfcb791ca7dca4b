//! The table of DLPack's type codes ([`CODES`]): dtype validity, Python names, numpy support.

use crate::ffi::{DLDataType, DLDataTypeCode};
#[cfg(doc)]
use crate::safe::Element;

/// The lanes a form of a [`CODES`] row allows.
#[derive(Clone, Copy)]
enum Lanes {
    /// Any non-zero number (vector types); named only with 1 lane.
    Any,
    /// Exactly this many.
    Exactly(u16),
}

/// What a type code allows, and what Python libraries call its dtypes.
enum Rule {
    /// Any non-zero bits and lanes, named `base` + bits; `numpy`: the widths numpy takes.
    Free {
        base: Option<&'static str>,
        numpy: &'static [u8],
    },
    /// Only these `(bits, lanes, name)` forms, described by `rule`; `numpy`: numpy takes it.
    Fixed {
        forms: &'static [(u8, Lanes, &'static str)],
        rule: &'static str,
        numpy: bool,
    },
}

macro_rules! free {
    ($base:expr, $numpy:expr) => {
        Rule::Free {
            base: $base,
            numpy: $numpy,
        }
    };
}

/// A [`Rule::Fixed`] row of `bits` bits and 1 lane, named `name`, that numpy does not take.
macro_rules! one_lane {
    ($bits:literal, $name:literal) => {
        Rule::Fixed {
            forms: &[($bits, Lanes::Exactly(1), $name)],
            rule: concat!($bits, " bits, 1 lane"),
            numpy: false,
        }
    };
}

/// DLPack's type codes (unlisted ones are free); a new dtype is a row and maybe an [`Element`].
const CODES: &[(DLDataTypeCode, Rule)] = {
    use DLDataTypeCode as C;
    use Lanes::{Any, Exactly};
    &[
        (C::INT, free!(Some("int"), &[8, 16, 32, 64])),
        (C::UINT, free!(Some("uint"), &[8, 16, 32, 64])),
        (C::FLOAT, free!(Some("float"), &[16, 32, 64])),
        (C::OPAQUE_HANDLE, free!(None, &[])),
        (
            C::BFLOAT,
            Rule::Fixed {
                forms: &[(16, Any, "bfloat16")],
                rule: "16 bits",
                numpy: false,
            },
        ),
        (C::COMPLEX, free!(Some("complex"), &[64, 128])),
        (
            C::BOOL,
            Rule::Fixed {
                forms: &[(8, Any, "bool")],
                rule: "8 bits",
                numpy: true,
            },
        ),
        (C::FLOAT8_E3M4, one_lane!(8, "float8_e3m4")),
        (C::FLOAT8_E4M3, one_lane!(8, "float8_e4m3")),
        (C::FLOAT8_E4M3B11FNUZ, one_lane!(8, "float8_e4m3b11fnuz")),
        (C::FLOAT8_E4M3FN, one_lane!(8, "float8_e4m3fn")),
        (C::FLOAT8_E4M3FNUZ, one_lane!(8, "float8_e4m3fnuz")),
        (C::FLOAT8_E5M2, one_lane!(8, "float8_e5m2")),
        (C::FLOAT8_E5M2FNUZ, one_lane!(8, "float8_e5m2fnuz")),
        (C::FLOAT8_E8M0FNU, one_lane!(8, "float8_e8m0fnu")),
        (C::FLOAT6_E2M3FN, one_lane!(6, "float6_e2m3fn")),
        (C::FLOAT6_E3M2FN, one_lane!(6, "float6_e3m2fn")),
        (
            C::FLOAT4_E2M1FN,
            Rule::Fixed {
                forms: &[
                    (4, Exactly(1), "float4_e2m1fn"),
                    (4, Exactly(2), "float4_e2m1fn_x2"),
                ],
                rule: "4 bits, 1 lane (packed) or 2 lanes (x2)",
                numpy: false,
            },
        ),
    ]
};

/// The row of `code` in [`CODES`].
const fn rule_of(code: DLDataTypeCode) -> Option<&'static Rule> {
    let mut i = 0;
    while i < CODES.len() {
        if CODES[i].0 .0 == code.0 {
            return Some(&CODES[i].1);
        }
        i += 1;
    }
    None
}

/// The form of a fixed code that `dtype` is, if any (lanes as the form allows them).
const fn fixed_form(dtype: DLDataType) -> Option<(Lanes, &'static str)> {
    let Some(Rule::Fixed { forms, .. }) = rule_of(dtype.code) else {
        return None;
    };
    let mut i = 0;
    while i < forms.len() {
        let (bits, lanes, name) = forms[i];
        let lanes_ok = match lanes {
            Lanes::Any => dtype.lanes != 0,
            Lanes::Exactly(n) => dtype.lanes == n,
        };
        if bits == dtype.bits && lanes_ok {
            return Some((lanes, name));
        }
        i += 1;
    }
    None
}

impl DLDataTypeCode {
    /// The `(bits, lanes)` this type code allows, described for error messages (`"8 bits, 1 lane"`
    /// for FP8); `None` when free.
    pub const fn rule(self) -> Option<&'static str> {
        match rule_of(self) {
            Some(Rule::Fixed { rule, .. }) => Some(rule),
            _ => None,
        }
    }
}

/// Whether a dtype has non-zero bits and lanes, in the form its code's rule names if any.
pub fn dtype_allowed(dtype: DLDataType) -> bool {
    dtype.bits != 0
        && dtype.lanes != 0
        && match rule_of(dtype.code) {
            Some(Rule::Fixed { .. }) => fixed_form(dtype).is_some(),
            _ => true,
        }
}

impl DLDataType {
    /// The name Python libraries give this dtype (`float32`, `float8_e4m3fn`, ...).
    ///
    /// ```
    /// use dlpack_rs::ffi::{DLDataType, DLDataTypeCode};
    ///
    /// assert_eq!(DLDataType::FLOAT32.name().to_string(), "float32");
    /// let fp4 = DLDataType { code: DLDataTypeCode::FLOAT4_E2M1FN, bits: 4, lanes: 2 };
    /// assert_eq!(fp4.name().to_string(), "float4_e2m1fn_x2");
    /// let odd = DLDataType { code: DLDataTypeCode::FLOAT8_E5M2, bits: 16, lanes: 1 };
    /// assert_eq!(odd.name().to_string(), "dtype(code=kDLFloat8_e5m2, bits=16, lanes=1)");
    /// ```
    pub fn name(self) -> impl core::fmt::Display {
        Name(self)
    }

    /// The fixed name of a bool, bfloat16, FP8, FP6 or FP4 dtype, else `None`.
    pub const fn fixed_name(self) -> Option<&'static str> {
        match fixed_form(self) {
            // A vector of a fixed code has no name of its own.
            Some((Lanes::Any, _)) if self.lanes != 1 => None,
            Some((_, name)) => Some(name),
            None => None,
        }
    }

    /// Whether every supported numpy takes this dtype over DLPack (not assuming `ml_dtypes`).
    pub const fn numpy_has(self) -> bool {
        if self.lanes != 1 {
            return false;
        }
        match rule_of(self.code) {
            Some(Rule::Free { numpy, .. }) => {
                let mut i = 0;
                while i < numpy.len() {
                    if numpy[i] == self.bits {
                        return true;
                    }
                    i += 1;
                }
                false
            }
            Some(Rule::Fixed { numpy, .. }) => *numpy && fixed_form(self).is_some(),
            None => false,
        }
    }
}

/// What [`DLDataType::name`] displays.
struct Name(DLDataType);

impl core::fmt::Display for Name {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let d = self.0;
        if let Some(name) = d.fixed_name() {
            return f.write_str(name);
        }
        match rule_of(d.code) {
            Some(Rule::Free {
                base: Some(base), ..
            }) if d.lanes == 1 => write!(f, "{base}{}", d.bits),
            _ => write!(
                f,
                "dtype(code={:?}, bits={}, lanes={})",
                d.code, d.bits, d.lanes
            ),
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod rule_examples {
    use super::dtype_allowed as validate_dtype;
    use crate::ffi::{DLDataType, DLDataTypeCode};

    #[test]
    fn validate_dtype_follows_the_rule() {
        let fp4x2 = DLDataType {
            code: DLDataTypeCode::FLOAT4_E2M1FN,
            bits: 4,
            lanes: 2,
        };
        assert!(validate_dtype(fp4x2));
        let fp8x2 = DLDataType {
            code: DLDataTypeCode::FLOAT8_E5M2,
            bits: 8,
            lanes: 2,
        };
        assert!(!validate_dtype(fp8x2));
    }
}
