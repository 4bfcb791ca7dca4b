//! safetensors integration from outside (feature `safetensors`): files read and mapped export
//! their tensors read-only over the file's own bytes, kept alive by every tensor; imports
//! serialize back, byte for byte; malformed files and unsupported tensors are refused.
#![cfg(feature = "safetensors")]

use std::path::PathBuf;

use dlpack_rs::ffi::DLDataType;
use dlpack_rs::safe::{Export, SafeTensorsFile};

fn temp(name: &str, bytes: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "dlpack-rs-{}-{name}.safetensors",
        std::process::id()
    ));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn sample() -> Vec<u8> {
    let a = Export::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
        .shape(&[2, 3])
        .versioned()
        .unwrap();
    let b = Export::new(vec![7i64, -8]).versioned().unwrap();
    let c = Export::new(Vec::<u8>::new())
        .shape(&[0, 4])
        .versioned()
        .unwrap();
    SafeTensorsFile::serialize([("a", &a), ("b", &b), ("empty", &c)]).unwrap()
}

#[test]
fn read_and_mapped_files_export_read_only_views_of_their_bytes() {
    let path = temp("views", &sample());
    // SAFETY: a file of this test's own, not changed while mapped.
    for file in [
        SafeTensorsFile::read(&path).unwrap(),
        unsafe { SafeTensorsFile::map(&path) }.unwrap(),
    ] {
        assert_eq!(file.names().collect::<Vec<_>>(), ["a", "b", "empty"]);
        let a = file.tensor("a").unwrap().unwrap();
        assert!(a.is_read_only());
        assert_eq!(
            (a.shape(), a.dtype()),
            (&[2i64, 3][..], DLDataType::FLOAT32)
        );
        assert_eq!(
            &*a.as_slice::<f32>().unwrap(),
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        let again = file.tensor("a").unwrap().unwrap();
        assert_eq!(again.data_ptr(), a.data_ptr()); // the same bytes, not a copy
        let b = file.tensor("b").unwrap().unwrap();
        assert_eq!(&*b.as_slice::<i64>().unwrap(), &[7, -8]);
        assert_eq!(file.tensor("empty").unwrap().unwrap().shape(), &[0, 4]);
        assert!(file.tensor("missing").is_none());
        // The tensor keeps the bytes alive after the file goes.
        drop(file);
        assert_eq!(a.as_slice::<f32>().unwrap()[5], 6.0);
        // Read-only: no mutable view, and the export's own shared borrow holds.
        let mut a = a;
        assert!(a.as_mut_slice::<f32>().is_err());
    }
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_file_round_trips_byte_for_byte() {
    let bytes = sample();
    let path = temp("roundtrip", &bytes);
    let file = SafeTensorsFile::read(&path).unwrap();
    let tensors: Vec<_> = file
        .names()
        .map(|n| (n.to_string(), file.tensor(n).unwrap().unwrap()))
        .collect();
    let again = SafeTensorsFile::serialize(tensors.iter().map(|(n, t)| (n.as_str(), t))).unwrap();
    assert_eq!(again, bytes);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn low_precision_and_packed_dtypes_keep_their_codes() {
    let f4 = Export::new(vec![0x21u8, 0x43])
        .packed(DLDataType::FLOAT4_E2M1FN)
        .shape(&[4])
        .versioned()
        .unwrap();
    let bytes = SafeTensorsFile::serialize([("f4", &f4)]).unwrap();
    let path = temp("packed", &bytes);
    let file = SafeTensorsFile::read(&path).unwrap();
    let t = file.tensor("f4").unwrap().unwrap();
    assert_eq!(
        (t.dtype(), t.shape(), t.nbytes()),
        (DLDataType::FLOAT4_E2M1FN, &[4i64][..], 2)
    );
    assert_eq!(
        t.as_packed().unwrap().values().collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    std::fs::remove_file(path).unwrap();
}

#[test]
fn strided_and_unsupported_tensors_are_refused_with_the_reason() {
    let t = Export::new(vec![1u8, 2, 3, 4, 5, 6])
        .shape(&[2, 3])
        .strides(&[1, 2])
        .versioned()
        .unwrap();
    let e = SafeTensorsFile::serialize([("t", &t)]).unwrap_err();
    assert_eq!(e, dlpack_rs::safe::Error::NotContiguous);
    let c = Export::new(vec![0u8; 2]).versioned().unwrap();
    let odd = dlpack_rs::safe::Export::new(vec![0u8; 2])
        .packed(DLDataType::new(dlpack_rs::ffi::DLDataTypeCode::UINT, 4, 1))
        .shape(&[4])
        .versioned()
        .unwrap();
    let e = SafeTensorsFile::serialize([("c", &c), ("u4", &odd)]).unwrap_err();
    assert!(e.to_string().contains("safetensors has no dtype"), "{e}");
}

#[test]
fn malformed_files_are_invalid_data() {
    for bytes in [
        &b""[..],
        b"\x08\x00\x00\x00\x00\x00\x00\x00{}",
        // A tensor whose range lies past the end of the file.
        b"\x40\x00\x00\x00\x00\x00\x00\x00{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}    ",
    ] {
        let path = temp("bad", bytes);
        let e = SafeTensorsFile::read(&path).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{bytes:?}: {e}");
        std::fs::remove_file(path).unwrap();
    }
    assert_eq!(
        SafeTensorsFile::read("/nonexistent/file.safetensors")
            .unwrap_err()
            .kind(),
        std::io::ErrorKind::NotFound
    );
}

#[test]
fn repeated_and_reserved_names_are_refused_before_serializing() {
    let t = Export::new(vec![1u8, 2]).versioned().unwrap();
    // safetensors' own serializer panics on a repeated name.
    let e = SafeTensorsFile::serialize([("a", &t), ("a", &t)]).unwrap_err();
    assert_eq!(
        e,
        dlpack_rs::safe::Error::Unserializable("tensor name \"a\": given twice".into())
    );
    // `__metadata__` is the header's metadata key: a file with such a tensor loads nowhere.
    let e = SafeTensorsFile::serialize([("__metadata__", &t)]).unwrap_err();
    assert!(e.to_string().contains("reserved"), "{e}");
}

#[test]
fn a_read_file_places_its_data_aligned_whatever_the_header_length() {
    // A header of a length that is no multiple of 8 (the format allows it): in the file, the
    // f32 starts at an odd offset.
    let json = br#"{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    assert_ne!((8 + json.len()) % 4, 0);
    let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(json);
    bytes.extend_from_slice(&1.5f32.to_le_bytes());
    bytes.extend_from_slice(&(-2.0f32).to_le_bytes());
    let path = temp("odd-header", &bytes);
    let read = SafeTensorsFile::read(&path).unwrap();
    let t = read.tensor("t").unwrap().unwrap();
    assert_eq!(t.data_ptr() as usize % 64, 0);
    assert_eq!(&*t.as_slice::<f32>().unwrap(), &[1.5, -2.0]);
    // Mapped, the tensor is where the file has it: typed views refuse the misaligned data.
    // SAFETY: this test's own file, unchanged while mapped.
    let mapped = unsafe { SafeTensorsFile::map(&path) }.unwrap();
    let t = mapped.tensor("t").unwrap().unwrap();
    assert!(matches!(
        t.as_slice::<f32>(),
        Err(dlpack_rs::safe::Error::Misaligned { .. })
    ));
    assert_eq!(t.nbytes(), 8);
    std::fs::remove_file(path).unwrap();
}
