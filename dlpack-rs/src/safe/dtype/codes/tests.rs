//! Tests of `dtype/codes.rs`: the table against the header's rules.

use super::*;
use alloc::string::ToString;

/// DLPack 1.3's rules for the codes with a fixed form, written as the header states them
/// (independent of the table): `(valid, name for one lane, numpy takes it)`.
fn model(d: DLDataType) -> (bool, Option<&'static str>, bool) {
    let (c, b, l) = (d.code.0, d.bits, d.lanes);
    let fixed_ok = match c {
        4 => b == 16,
        6 => b == 8,
        7..=14 => b == 8 && l == 1,
        15 | 16 => b == 6 && l == 1,
        17 => b == 4 && (l == 1 || l == 2),
        _ => true,
    };
    let name = match (c, b, l) {
        (4, 16, 1) => Some("bfloat16"),
        (6, 8, 1) => Some("bool"),
        (7, 8, 1) => Some("float8_e3m4"),
        (8, 8, 1) => Some("float8_e4m3"),
        (9, 8, 1) => Some("float8_e4m3b11fnuz"),
        (10, 8, 1) => Some("float8_e4m3fn"),
        (11, 8, 1) => Some("float8_e4m3fnuz"),
        (12, 8, 1) => Some("float8_e5m2"),
        (13, 8, 1) => Some("float8_e5m2fnuz"),
        (14, 8, 1) => Some("float8_e8m0fnu"),
        (15, 6, 1) => Some("float6_e2m3fn"),
        (16, 6, 1) => Some("float6_e3m2fn"),
        (17, 4, 1) => Some("float4_e2m1fn"),
        (17, 4, 2) => Some("float4_e2m1fn_x2"),
        _ => None,
    };
    let numpy = l == 1
        && matches!(
            (c, b),
            (0 | 1, 8 | 16 | 32 | 64) | (2, 16 | 32 | 64) | (5, 64 | 128) | (6, 8)
        );
    (b != 0 && l != 0 && fixed_ok, name, numpy)
}

#[test]
fn the_code_table_answers_as_the_header_rules_for_every_small_dtype() {
    for code in 0..=24u8 {
        for bits in 0..=255u8 {
            for lanes in 0..=4u16 {
                let d = DLDataType {
                    code: DLDataTypeCode(code),
                    bits,
                    lanes,
                };
                let (valid, name, numpy) = model(d);
                assert_eq!(dtype_allowed(d), valid, "{d:?}");
                assert_eq!(d.fixed_name(), name, "{d:?}");
                assert_eq!(d.numpy_has(), numpy, "{d:?}");
            }
        }
    }
}

#[test]
fn names_of_free_codes_come_from_the_table() {
    let name = |code, bits, lanes| DLDataType { code, bits, lanes }.name().to_string();
    assert_eq!(name(DLDataTypeCode::INT, 8, 1), "int8");
    assert_eq!(name(DLDataTypeCode::UINT, 16, 1), "uint16");
    assert_eq!(name(DLDataTypeCode::FLOAT, 32, 1), "float32");
    assert_eq!(name(DLDataTypeCode::COMPLEX, 128, 1), "complex128");
    assert_eq!(
        name(DLDataTypeCode::FLOAT, 32, 4),
        "dtype(code=kDLFloat, bits=32, lanes=4)"
    );
    assert_eq!(
        name(DLDataTypeCode::BOOL, 8, 2),
        "dtype(code=kDLBool, bits=8, lanes=2)"
    );
    assert_eq!(
        name(DLDataTypeCode::OPAQUE_HANDLE, 64, 1),
        "dtype(code=kDLOpaqueHandle, bits=64, lanes=1)"
    );
    assert_eq!(DLDataTypeCode::BFLOAT.rule(), Some("16 bits"));
    assert_eq!(DLDataTypeCode::INT.rule(), None);
    assert_eq!(DLDataTypeCode::BCOMPLEX.rule(), None);
}
