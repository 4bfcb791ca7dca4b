//! safetensors files (feature `safetensors`): [`SafeTensorsFile`] exports a file's tensors
//! zero-copy; [`SafeTensorsFile::serialize`] writes tensors in the format.

use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use std::io;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, View};

use crate::ffi::{DLDataType, DLDataTypeCode as C, DLPACK_FLAG_BITMASK_READ_ONLY};
use crate::safe::{
    cpu_device, AlignedBuffer, Error, Kind, Managed, ManagedTensorVersioned, ReadGuard, Readers,
    TensorInfo, Validated,
};

/// safetensors' dtypes and the DLPack type code and bits of each (one lane).
const DTYPES: &[(Dtype, C, u8)] = &[
    (Dtype::BOOL, C::BOOL, 8),
    (Dtype::U8, C::UINT, 8),
    (Dtype::I8, C::INT, 8),
    (Dtype::U16, C::UINT, 16),
    (Dtype::I16, C::INT, 16),
    (Dtype::U32, C::UINT, 32),
    (Dtype::I32, C::INT, 32),
    (Dtype::U64, C::UINT, 64),
    (Dtype::I64, C::INT, 64),
    (Dtype::F16, C::FLOAT, 16),
    (Dtype::BF16, C::BFLOAT, 16),
    (Dtype::F32, C::FLOAT, 32),
    (Dtype::F64, C::FLOAT, 64),
    (Dtype::C64, C::COMPLEX, 64),
    // safetensors' F8_E4M3 is torch's and jax's float8_e4m3fn.
    (Dtype::F8_E4M3, C::FLOAT8_E4M3FN, 8),
    (Dtype::F8_E5M2, C::FLOAT8_E5M2, 8),
    (Dtype::F8_E4M3FNUZ, C::FLOAT8_E4M3FNUZ, 8),
    (Dtype::F8_E5M2FNUZ, C::FLOAT8_E5M2FNUZ, 8),
    (Dtype::F8_E8M0, C::FLOAT8_E8M0FNU, 8),
    (Dtype::F6_E2M3, C::FLOAT6_E2M3FN, 6),
    (Dtype::F6_E3M2, C::FLOAT6_E3M2FN, 6),
    (Dtype::F4, C::FLOAT4_E2M1FN, 4),
];

fn dlpack_dtype(dtype: Dtype) -> Option<DLDataType> {
    let &(_, code, bits) = DTYPES.iter().find(|row| row.0 == dtype)?;
    Some(DLDataType::new(code, bits, 1))
}

fn safetensors_dtype(dtype: DLDataType) -> Option<Dtype> {
    DTYPES
        .iter()
        .find(|&&(_, code, bits)| DLDataType::new(code, bits, 1) == dtype)
        .map(|row| row.0)
}

/// The file's bytes: read (from the offset that aligns the data section to 64 bytes), or mapped.
enum Bytes {
    Read(AlignedBuffer<u8>, usize),
    Mapped(memmap2::MmapMut),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Read(b, start) => &b[*start..],
            Bytes::Mapped(m) => m,
        }
    }
}

/// A safetensors file whose tensors export read-only and zero-copy, each keeping the bytes alive;
/// every tensor's dtype, shape and byte range is checked when the file is opened.
///
/// ```
/// use dlpack_rs::safe::{Export, SafeTensorsFile};
///
/// let weights = Export::new(vec![1.0f32, 2.0, 3.0, 4.0]).shape(&[2, 2]).versioned()?;
/// let path = std::env::temp_dir().join(format!("dlpack-rs-doc-{}.safetensors", std::process::id()));
/// std::fs::write(&path, SafeTensorsFile::serialize([("weights", &weights)])?)?;
/// let file = SafeTensorsFile::read(&path)?;
/// assert_eq!(file.names().collect::<Vec<_>>(), ["weights"]);
/// let t = file.tensor("weights").unwrap()?;
/// assert!(t.is_read_only());
/// assert_eq!((t.shape(), &*t.as_slice::<f32>()?), (&[2i64, 2][..], &[1.0, 2.0, 3.0, 4.0][..]));
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SafeTensorsFile {
    bytes: Arc<Bytes>,
    tensors: BTreeMap<String, TensorInfo>,
}

impl SafeTensorsFile {
    /// Reads the file at `path` into memory, its data section 64-byte aligned: `InvalidData` for a
    /// file that is not safetensors, a dtype without a DLPack code, or bytes that miss the shape.
    pub fn read(path: impl AsRef<Path>) -> io::Result<Self> {
        use std::io::Read;
        let mut file = std::fs::File::open(path)?;
        let too_large = || io::Error::new(io::ErrorKind::OutOfMemory, "file too large");
        let len = usize::try_from(file.metadata()?.len()).map_err(|_| too_large())?;
        // The header's length (8 bytes, little-endian) gives the data section's start.
        let mut head = [0u8; 8];
        let got = len.min(8);
        file.read_exact(&mut head[..got])?;
        let data_start = (got == 8)
            .then(|| {
                usize::try_from(u64::from_le_bytes(head))
                    .ok()?
                    .checked_add(8)
            })
            .flatten();
        let pad = data_start.map_or(0, |start| (64 - start % 64) % 64);
        let total = len.checked_add(pad).ok_or_else(too_large)?;
        let mut buffer = AlignedBuffer::<u8>::zeroed(total).map_err(|_| too_large())?;
        buffer[pad..pad + got].copy_from_slice(&head[..got]);
        file.read_exact(&mut buffer[pad + got..])?;
        Self::parse(Bytes::Read(buffer, pad))
    }

    /// Maps the file at `path` in private copy-on-write pages (a consumer that ignores
    /// `READ_ONLY` writes its own copy), checked as [`read`](Self::read) checks.
    ///
    /// # Safety
    /// The file must not be written or truncated, by any process, while the `SafeTensorsFile`
    /// or any tensor exported from it lives.
    pub unsafe fn map(path: impl AsRef<Path>) -> io::Result<Self> {
        let file = std::fs::File::open(path)?;
        // SAFETY: the caller's contract: nobody changes the file while the mapping is used.
        let map = unsafe { memmap2::MmapOptions::new().map_copy(&file) }?;
        Self::parse(Bytes::Mapped(map))
    }

    fn parse(bytes: Bytes) -> io::Result<Self> {
        let bytes = Arc::new(bytes);
        let parsed = SafeTensors::deserialize(bytes.as_slice())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut tensors = BTreeMap::new();
        for (name, view) in parsed.iter() {
            let dtype = dlpack_dtype(view.dtype()).ok_or_else(|| {
                named(
                    name,
                    format_args!("dtype {:?} has no DLPack code", view.dtype()),
                )
            })?;
            let shape = view
                .shape()
                .iter()
                .map(|&d| i64::try_from(d).map_err(|_| named(name, Error::Overflow)))
                .collect::<io::Result<Vec<i64>>>()?;
            let data = view.data();
            let info =
                TensorInfo::contiguous(data.as_ptr().cast_mut().cast(), cpu_device(), dtype, shape);
            // The tensor's bytes are exactly its data range (safetensors checks it too).
            let validated = Validated::new(info.clone()).map_err(|e| named(name, e))?;
            let packed_len = crate::safe::element_bits(dtype)
                .checked_mul(validated.extent().numel as u64)
                .map(|bits| bits.div_ceil(8));
            if packed_len != Some(data.len() as u64) {
                let numel = validated.extent().numel;
                let (len, dtype) = (data.len(), dtype.name());
                return Err(named(
                    name,
                    format_args!("{len} bytes for {numel} elements of {dtype}"),
                ));
            }
            tensors.insert(name.to_string(), info);
        }
        Ok(SafeTensorsFile { bytes, tensors })
    }

    /// Serializes `(name, tensor)` pairs in the safetensors format.
    ///
    /// [`Error::Unserializable`] for a repeated name, `__metadata__`, a dtype the format lacks, or
    /// sub-byte elements that fill no whole number of bytes; [`Error::NotContiguous`],
    /// [`Error::NotHostAccessible`] or [`Error::AlreadyBorrowed`] for a tensor it cannot read.
    pub fn serialize<'a, S, K, I>(tensors: I) -> Result<Vec<u8>, Error>
    where
        S: AsRef<str>,
        K: Kind + 'a,
        I: IntoIterator<Item = (S, &'a Managed<K>)>,
    {
        let mut views = Vec::new();
        let mut names = alloc::collections::BTreeSet::new();
        for (name, t) in tensors {
            let name = name.as_ref();
            // safetensors panics on a repeated name, and `__metadata__` is the header's own key.
            if name == "__metadata__" {
                return Err(unserializable(name, "reserved for the header's metadata"));
            }
            if !names.insert(name.to_string()) {
                return Err(unserializable(name, "given twice"));
            }
            let dtype = safetensors_dtype(t.dtype()).ok_or_else(|| {
                unserializable(
                    name,
                    &alloc::format!("safetensors has no dtype {}", t.dtype().name()),
                )
            })?;
            let bits = u128::from(crate::safe::element_bits(t.dtype()));
            if bits < 8 && (t.numel() as u128 * bits) % 8 != 0 {
                // safetensors refuses it too, without saying which tensor.
                return Err(unserializable(
                    name,
                    "sub-byte elements that do not fill a whole number of bytes",
                ));
            }
            let shape = t.shape().iter().map(|&d| d as usize).collect();
            views.push((
                name.to_string(),
                Bytewise {
                    dtype,
                    shape,
                    bytes: t.contiguous_bytes()?,
                },
            ));
        }
        safetensors::serialize(views.iter().map(|(n, v)| (n.as_str(), v)), None)
            .map_err(|e| Error::Unserializable(e.to_string()))
    }

    /// The tensors' names, in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The tensor `name` as a read-only managed tensor keeping the file's bytes alive, or `None`.
    /// Typed views of a misaligned tensor are refused, as for any producer.
    pub fn tensor(&self, name: &str) -> Option<Result<ManagedTensorVersioned, Error>> {
        let info = self.tensors.get(name)?.clone();
        // SAFETY: `info` lies in the file's bytes (checked when parsed), kept in place by the
        // `Arc`; nobody writes them: exported `READ_ONLY` under a shared borrow, reached only by
        // exports, and a mapped file is unchanged by `map`'s contract.
        Some(unsafe {
            crate::safe::pack_owned::<crate::ffi::DLManagedTensorVersioned, _>(
                Arc::clone(&self.bytes),
                info,
                DLPACK_FLAG_BITMASK_READ_ONLY,
                Readers::Rust,
                None,
            )
        })
    }
}

impl core::fmt::Debug for SafeTensorsFile {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SafeTensorsFile")
            .field("tensors", &self.tensors.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// `InvalidData` naming the tensor.
fn named(name: &str, e: impl core::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        alloc::format!("tensor {name}: {e}"),
    )
}

/// One tensor to serialize: its dtype and shape, and its bytes under a shared borrow.
struct Bytewise<'a> {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: ReadGuard<'a, &'a [u8]>,
}

impl View for &Bytewise<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// `Unserializable`, naming the tensor.
fn unserializable(name: &str, reason: &str) -> Error {
    Error::Unserializable(alloc::format!("tensor name {name:?}: {reason}"))
}
