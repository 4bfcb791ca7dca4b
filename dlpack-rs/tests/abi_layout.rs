//! Is `dlpack_rs::ffi` laid out exactly like the official `dlpack.h`?
//!
//! This test prints one line per fact about the Rust side (size, alignment, field offset and
//! field size of every struct, the value of every constant) in the format of
//! `tests/abi/layout.c`. When `DLPACK_ABI_C_OUTPUT` names a file with the C compiler's lines
//! for the official header (`tests/abi/check.sh` produces it and sets the variable), the test
//! compares the two and fails on any difference. Without the variable only the Rust side's
//! own consistency is checked.
//!
//! `DLPACK_ABI_RUST_OUTPUT`, when set, receives the Rust lines (for a human `diff`).

use core::mem::{align_of, offset_of, size_of};
use std::collections::BTreeMap;

use dlpack_rs::ffi::*;

/// Facts only the Rust side has: values newer than DLPack 1.3 that this crate already knows
/// (TPU, TPU host and Ascend devices, bfloat16 complex). The header lacks them; any other one-sided
/// line is an error. Should the header gain one of these, it is compared like any other.
const RUST_ONLY: &[&str] = &[
    "const kDLTPU 19",
    "const kDLTPUHost 20",
    "const kDLAscend 21",
    "const kDLBcomplex 18",
];

/// Facts only the C side has: none.
const C_ONLY: &[&str] = &[];

/// `size_of` a field, given a projection to it.
fn field_size<T, F>(_project: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

macro_rules! ty {
    ($out:ident, $t:ty, $name:literal) => {
        $out.push(format!("size {} {}", $name, size_of::<$t>()));
        $out.push(format!("align {} {}", $name, align_of::<$t>()));
    };
}

macro_rules! field {
    ($out:ident, $t:ident, $f:ident) => {
        $out.push(format!(
            "offset {}.{} {}",
            stringify!($t),
            stringify!($f),
            offset_of!($t, $f)
        ));
        $out.push(format!(
            "fsize {}.{} {}",
            stringify!($t),
            stringify!($f),
            field_size::<$t, _>(|s| &s.$f)
        ));
    };
}

/// Every named device type: (C name, the crate's `K_DL_*` constant).
const DEVICE_TYPES: &[(&str, DLDeviceType)] = &[
    ("kDLCPU", K_DL_CPU),
    ("kDLCUDA", K_DL_CUDA),
    ("kDLCUDAHost", K_DL_CUDA_HOST),
    ("kDLOpenCL", K_DL_OPENCL),
    ("kDLVulkan", K_DL_VULKAN),
    ("kDLMetal", K_DL_METAL),
    ("kDLVPI", K_DL_VPI),
    ("kDLROCM", K_DL_ROCM),
    ("kDLROCMHost", K_DL_ROCM_HOST),
    ("kDLExtDev", K_DL_EXT_DEV),
    ("kDLCUDAManaged", K_DL_CUDA_MANAGED),
    ("kDLOneAPI", K_DL_ONE_API),
    ("kDLWebGPU", K_DL_WEBGPU),
    ("kDLHexagon", K_DL_HEXAGON),
    ("kDLMAIA", K_DL_MAIA),
    ("kDLTrn", K_DL_TRN),
    ("kDLTPU", K_DL_TPU),
    ("kDLTPUHost", K_DL_TPU_HOST),
    ("kDLAscend", K_DL_ASCEND),
];

/// Every named type code: (C name, the crate's `K_DL_*` constant).
const TYPE_CODES: &[(&str, DLDataTypeCode)] = &[
    ("kDLInt", K_DL_INT),
    ("kDLUInt", K_DL_UINT),
    ("kDLFloat", K_DL_FLOAT),
    ("kDLOpaqueHandle", K_DL_OPAQUE_HANDLE),
    ("kDLBfloat", K_DL_BFLOAT),
    ("kDLComplex", K_DL_COMPLEX),
    ("kDLBool", K_DL_BOOL),
    ("kDLFloat8_e3m4", K_DL_FLOAT8_E3M4),
    ("kDLFloat8_e4m3", K_DL_FLOAT8_E4M3),
    ("kDLFloat8_e4m3b11fnuz", K_DL_FLOAT8_E4M3B11FNUZ),
    ("kDLFloat8_e4m3fn", K_DL_FLOAT8_E4M3FN),
    ("kDLFloat8_e4m3fnuz", K_DL_FLOAT8_E4M3FNUZ),
    ("kDLFloat8_e5m2", K_DL_FLOAT8_E5M2),
    ("kDLFloat8_e5m2fnuz", K_DL_FLOAT8_E5M2FNUZ),
    ("kDLFloat8_e8m0fnu", K_DL_FLOAT8_E8M0FNU),
    ("kDLFloat6_e2m3fn", K_DL_FLOAT6_E2M3FN),
    ("kDLFloat6_e3m2fn", K_DL_FLOAT6_E3M2FN),
    ("kDLFloat4_e2m1fn", K_DL_FLOAT4_E2M1FN),
    ("kDLBcomplex", K_DL_BCOMPLEX),
];

fn rust_facts() -> Vec<String> {
    let mut out = Vec::new();

    ty!(out, DLPackVersion, "DLPackVersion");
    field!(out, DLPackVersion, major);
    field!(out, DLPackVersion, minor);

    ty!(out, DLDeviceType, "DLDeviceType");

    ty!(out, DLDevice, "DLDevice");
    field!(out, DLDevice, device_type);
    field!(out, DLDevice, device_id);

    ty!(out, DLDataType, "DLDataType");
    field!(out, DLDataType, code);
    field!(out, DLDataType, bits);
    field!(out, DLDataType, lanes);

    ty!(out, DLTensor, "DLTensor");
    field!(out, DLTensor, data);
    field!(out, DLTensor, device);
    field!(out, DLTensor, ndim);
    field!(out, DLTensor, dtype);
    field!(out, DLTensor, shape);
    field!(out, DLTensor, strides);
    field!(out, DLTensor, byte_offset);

    ty!(out, DLManagedTensor, "DLManagedTensor");
    field!(out, DLManagedTensor, dl_tensor);
    field!(out, DLManagedTensor, manager_ctx);
    field!(out, DLManagedTensor, deleter);

    ty!(out, DLManagedTensorVersioned, "DLManagedTensorVersioned");
    field!(out, DLManagedTensorVersioned, version);
    field!(out, DLManagedTensorVersioned, manager_ctx);
    field!(out, DLManagedTensorVersioned, deleter);
    field!(out, DLManagedTensorVersioned, flags);
    field!(out, DLManagedTensorVersioned, dl_tensor);

    ty!(
        out,
        DLPackManagedTensorAllocator,
        "DLPackManagedTensorAllocator"
    );
    ty!(
        out,
        DLPackManagedTensorFromPyObjectNoSync,
        "DLPackManagedTensorFromPyObjectNoSync"
    );
    ty!(
        out,
        DLPackManagedTensorToPyObjectNoSync,
        "DLPackManagedTensorToPyObjectNoSync"
    );
    ty!(
        out,
        DLPackDLTensorFromPyObjectNoSync,
        "DLPackDLTensorFromPyObjectNoSync"
    );
    ty!(out, DLPackCurrentWorkStream, "DLPackCurrentWorkStream");

    ty!(out, DLPackExchangeAPIHeader, "DLPackExchangeAPIHeader");
    field!(out, DLPackExchangeAPIHeader, version);
    field!(out, DLPackExchangeAPIHeader, prev_api);

    ty!(out, DLPackExchangeAPI, "DLPackExchangeAPI");
    field!(out, DLPackExchangeAPI, header);
    field!(out, DLPackExchangeAPI, managed_tensor_allocator);
    field!(
        out,
        DLPackExchangeAPI,
        managed_tensor_from_py_object_no_sync
    );
    field!(out, DLPackExchangeAPI, managed_tensor_to_py_object_no_sync);
    field!(out, DLPackExchangeAPI, dltensor_from_py_object_no_sync);
    field!(out, DLPackExchangeAPI, current_work_stream);

    for (name, value) in DEVICE_TYPES {
        out.push(format!("const {name} {}", value.0));
    }
    for (name, value) in TYPE_CODES {
        out.push(format!("const {name} {}", value.0));
    }
    out.push(format!("const DLPACK_MAJOR_VERSION {DLPACK_MAJOR_VERSION}"));
    out.push(format!("const DLPACK_MINOR_VERSION {DLPACK_MINOR_VERSION}"));
    out.push(format!(
        "const DLPACK_FLAG_BITMASK_READ_ONLY {DLPACK_FLAG_BITMASK_READ_ONLY}"
    ));
    out.push(format!(
        "const DLPACK_FLAG_BITMASK_IS_COPIED {DLPACK_FLAG_BITMASK_IS_COPIED}"
    ));
    out.push(format!(
        "const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED {DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED}"
    ));
    out
}

/// The tables above list every value the crate names, and with the names the crate uses.
#[test]
fn name_tables_are_complete() {
    let named_devices: Vec<(String, i32)> = (-1..=1024)
        .filter_map(|v| DLDeviceType(v).name().map(|n| (n.to_string(), v)))
        .collect();
    let listed: Vec<(String, i32)> = DEVICE_TYPES
        .iter()
        .map(|(n, v)| (n.to_string(), v.0))
        .collect();
    assert_eq!(named_devices, listed, "DEVICE_TYPES vs DLDeviceType::name");

    let named_codes: Vec<(String, u8)> = (0..=u8::MAX)
        .filter_map(|v| DLDataTypeCode(v).name().map(|n| (n.to_string(), v)))
        .collect();
    let listed: Vec<(String, u8)> = TYPE_CODES
        .iter()
        .map(|(n, v)| (n.to_string(), v.0))
        .collect();
    assert_eq!(named_codes, listed, "TYPE_CODES vs DLDataTypeCode::name");
}

/// Splits "kind name value" lines into name -> (kind, value), rejecting duplicates.
fn index(lines: &[String], side: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in lines {
        let mut parts = line.split_whitespace();
        let (Some(kind), Some(name), Some(value), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            panic!("{side}: malformed line {line:?}");
        };
        let key = format!("{kind} {name}");
        assert!(
            map.insert(key.clone(), value.to_string()).is_none(),
            "{side}: duplicate {key}"
        );
    }
    map
}

/// Without the C side, the Rust side can still be checked for completeness: one fact per key.
#[test]
fn rust_facts_are_unique_and_complete() {
    let rust = rust_facts();
    assert!(rust.len() > 50, "only {} Rust facts", rust.len());
    let _ = index(&rust, "Rust"); // panics on a duplicate key
}

/// The comparison with the C compiler's output. Ignored in a plain `cargo test` (shown as
/// ignored, not passed): `tests/abi/check.sh` compiles the official `dlpack.h` and runs it with
/// `--ignored` and `DLPACK_ABI_C_OUTPUT` set.
#[test]
#[ignore = "needs the C compiler's output: run tests/abi/check.sh"]
fn layout_matches_the_c_header() {
    let rust = rust_facts();
    if let Some(path) = std::env::var_os("DLPACK_ABI_RUST_OUTPUT") {
        std::fs::write(&path, rust.join("\n") + "\n").expect("write DLPACK_ABI_RUST_OUTPUT");
    }
    let c_path = std::env::var_os("DLPACK_ABI_C_OUTPUT")
        .expect("DLPACK_ABI_C_OUTPUT must name the C side's output (tests/abi/check.sh sets it)");
    let c_text = std::fs::read_to_string(&c_path).expect("read DLPACK_ABI_C_OUTPUT");
    let c_lines: Vec<String> = c_text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    assert!(
        c_lines.len() > 50,
        "the C output has only {} lines",
        c_lines.len()
    );

    let c = index(&c_lines, "C");
    let r = index(&rust, "Rust");
    let mut problems = Vec::new();
    let mut compared = 0;
    for (key, c_value) in &c {
        match r.get(key) {
            Some(r_value) if r_value == c_value => compared += 1,
            Some(r_value) => problems.push(format!("{key}: C {c_value}, Rust {r_value}")),
            None if C_ONLY.contains(&format!("{key} {c_value}").as_str()) => {}
            None => problems.push(format!("{key}: C {c_value}, missing on the Rust side")),
        }
    }
    for (key, r_value) in &r {
        if c.contains_key(key) {
            continue;
        }
        let line = format!("{key} {r_value}");
        if RUST_ONLY.contains(&line.as_str()) {
            eprintln!("abi_layout: expected Rust-only fact (newer than the header): {line}");
        } else {
            problems.push(format!("{key}: Rust {r_value}, missing from the C header"));
        }
    }
    assert!(
        problems.is_empty(),
        "the Rust ABI differs from dlpack.h:\n  {}",
        problems.join("\n  ")
    );
    eprintln!("abi_layout: {compared} facts identical in C and Rust");
}
