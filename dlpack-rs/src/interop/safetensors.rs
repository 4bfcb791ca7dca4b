//! safetensors files as tensors (feature `safetensors`, safetensors 0.8): [`SafeTensorsFile`]
//! opens a file (read into one 64-byte aligned allocation, or memory-mapped) and exports each
//! named tensor read-only and zero-copy, every tensor keeping the file's bytes alive;
//! [`serialize_safetensors`] writes imported tensors in the format.

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
    cpu_device, AlignedBuffer, Error, Kind, Managed, ManagedTensorVersioned, ReadSlice, Readers,
    TensorInfo, Validated,
};

/// The DLPack dtype of each safetensors dtype (every one has a DLPack code).
fn dlpack_dtype(dtype: Dtype) -> Option<DLDataType> {
    let (code, bits, lanes) = match dtype {
        Dtype::BOOL => (C::BOOL, 8, 1),
        Dtype::U8 => (C::UINT, 8, 1),
        Dtype::I8 => (C::INT, 8, 1),
        Dtype::U16 => (C::UINT, 16, 1),
        Dtype::I16 => (C::INT, 16, 1),
        Dtype::U32 => (C::UINT, 32, 1),
        Dtype::I32 => (C::INT, 32, 1),
        Dtype::U64 => (C::UINT, 64, 1),
        Dtype::I64 => (C::INT, 64, 1),
        Dtype::F16 => (C::FLOAT, 16, 1),
        Dtype::BF16 => (C::BFLOAT, 16, 1),
        Dtype::F32 => (C::FLOAT, 32, 1),
        Dtype::F64 => (C::FLOAT, 64, 1),
        Dtype::C64 => (C::COMPLEX, 64, 1),
        // safetensors' F8_E4M3 is torch's and jax's float8_e4m3fn.
        Dtype::F8_E4M3 => (C::FLOAT8_E4M3FN, 8, 1),
        Dtype::F8_E5M2 => (C::FLOAT8_E5M2, 8, 1),
        Dtype::F8_E4M3FNUZ => (C::FLOAT8_E4M3FNUZ, 8, 1),
        Dtype::F8_E5M2FNUZ => (C::FLOAT8_E5M2FNUZ, 8, 1),
        Dtype::F8_E8M0 => (C::FLOAT8_E8M0FNU, 8, 1),
        Dtype::F6_E2M3 => (C::FLOAT6_E2M3FN, 6, 1),
        Dtype::F6_E3M2 => (C::FLOAT6_E3M2FN, 6, 1),
        Dtype::F4 => (C::FLOAT4_E2M1FN, 4, 1),
        _ => return None,
    };
    Some(DLDataType::new(code, bits, lanes))
}

/// The safetensors dtype of a DLPack dtype, where the format has one.
fn safetensors_dtype(dtype: DLDataType) -> Option<Dtype> {
    [
        Dtype::BOOL,
        Dtype::U8,
        Dtype::I8,
        Dtype::U16,
        Dtype::I16,
        Dtype::U32,
        Dtype::I32,
        Dtype::U64,
        Dtype::I64,
        Dtype::F16,
        Dtype::BF16,
        Dtype::F32,
        Dtype::F64,
        Dtype::C64,
        Dtype::F8_E4M3,
        Dtype::F8_E5M2,
        Dtype::F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ,
        Dtype::F8_E8M0,
        Dtype::F6_E2M3,
        Dtype::F6_E3M2,
        Dtype::F4,
    ]
    .into_iter()
    .find(|&d| dlpack_dtype(d) == Some(dtype))
}

/// The file's bytes: read into memory (from `start` on: placed so that the data section starts
/// 64-byte aligned), or mapped.
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

/// A safetensors file whose tensors export read-only and zero-copy: each export is a view of
/// the file's own bytes that keeps them alive (the `SafeTensorsFile` may go first).
///
/// [`read`](Self::read) reads the file into one 64-byte aligned allocation (safe; the file is
/// read once); [`map`](Self::map) maps it (no read, pages come in as used; `unsafe`: the file
/// must not change while mapped). The header is parsed and every tensor's dtype, shape and
/// byte range checked when the file is opened.
///
/// ```
/// use dlpack_rs::safe::{serialize_safetensors, Export, SafeTensorsFile};
///
/// let weights = Export::new(vec![1.0f32, 2.0, 3.0, 4.0]).shape(&[2, 2]).versioned()?;
/// let bytes = serialize_safetensors([("weights", &weights)])?;
/// let path = std::env::temp_dir().join(format!("dlpack-rs-doc-{}.safetensors", std::process::id()));
/// std::fs::write(&path, bytes)?;
///
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
    /// Reads the file at `path` into memory and parses its header: `InvalidData` for a file
    /// that is not safetensors or describes a tensor out of its bytes. The data section is
    /// placed 64-byte aligned whatever the header's length, so each tensor is as aligned as its
    /// offset in the section.
    pub fn read(path: impl AsRef<Path>) -> io::Result<Self> {
        use std::io::Read;
        let mut file = std::fs::File::open(path)?;
        let too_large = || io::Error::new(io::ErrorKind::OutOfMemory, "file too large");
        let len = usize::try_from(file.metadata()?.len()).map_err(|_| too_large())?;
        // The header's length (8 bytes, little-endian) says where the data section starts.
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

    /// Maps the file at `path` into memory and parses its header, as [`read`](Self::read) does
    /// (tensors are then as aligned as their offsets in the file). The pages are private
    /// copy-on-write: a consumer that writes a tensor despite `READ_ONLY` (torch does not honour
    /// the flag) changes its own copy of the page, never the file, and does not fault.
    ///
    /// # Safety
    ///
    /// The file must not be written or truncated, by this process or another, while the
    /// `SafeTensorsFile` or any tensor exported from it lives: its tensors are views of the
    /// mapped pages (a change would be a data race with every reader, a truncation a crash).
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
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    alloc::format!("tensor {name}: dtype {:?} has no DLPack code", view.dtype()),
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
            // The tensor's bytes are exactly its data range (safetensors checked that the range
            // lies in the file and matches the shape and dtype; checked here again).
            let validated = Validated::new(info.clone()).map_err(|e| named(name, e))?;
            let packed_len = crate::safe::element_bits(dtype)
                .checked_mul(validated.extent().numel as u64)
                .map(|bits| bits.div_ceil(8));
            if packed_len != Some(data.len() as u64) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    alloc::format!(
                        "tensor {name}: {} bytes for {} elements of {}",
                        data.len(),
                        validated.extent().numel,
                        crate::safe::DtypeName(dtype)
                    ),
                ));
            }
            tensors.insert(name.to_string(), info);
        }
        Ok(SafeTensorsFile { bytes, tensors })
    }

    /// The tensors' names, in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The tensor `name` as a read-only managed tensor over the file's bytes (which it keeps
    /// alive), or `None` if the file has no such tensor. Its alignment is the file's: typed
    /// views of a misaligned tensor are refused, as for any producer.
    pub fn tensor(&self, name: &str) -> Option<Result<ManagedTensorVersioned, Error>> {
        let info = self.tensors.get(name)?.clone();
        // SAFETY: `info` describes bytes of the file's buffer (checked when parsed), which the
        // `Arc` (the keepalive) keeps valid and in place; nobody writes them: exported
        // `READ_ONLY` (and so holding a shared borrow of them), the buffer is reached by nothing
        // but exports, and a mapped file is unchanged by `map`'s contract.
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
fn named(name: &str, e: Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        alloc::format!("tensor {name}: {e}"),
    )
}

/// One tensor to serialize: its dtype and shape, and its bytes under a shared borrow.
struct Bytewise<'a> {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: ReadSlice<'a, u8>,
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

/// Serializes `tensors` (name, tensor: any owner, an import or an export) in the safetensors
/// format, reading each under a shared borrow: every tensor must be a C-contiguous host tensor
/// (`NotContiguous`, `NotHostAccessible`) of a dtype the format has, under a name given once
/// that is not `__metadata__` (`Unserializable`, naming the tensor), with no mutable view of it
/// alive (`AlreadyBorrowed`). In Python these raise `BufferError`, `ValueError` for the names
/// and dtypes.
pub fn serialize_safetensors<'a, S, K, I>(tensors: I) -> Result<Vec<u8>, Error>
where
    S: AsRef<str>,
    K: Kind + 'a,
    I: IntoIterator<Item = (S, &'a Managed<K>)>,
{
    let mut views = Vec::new();
    let mut names = alloc::collections::BTreeSet::new();
    for (name, t) in tensors {
        let name = name.as_ref();
        // safetensors' own serializer would panic on a repeated name, and writes a file no
        // loader reads for `__metadata__` (the header's metadata key).
        if name == "__metadata__" {
            return Err(unserializable(name, "reserved for the header's metadata"));
        }
        if !names.insert(name.to_string()) {
            return Err(unserializable(name, "given twice"));
        }
        let dtype = safetensors_dtype(t.dtype()).ok_or_else(|| {
            unserializable(
                name,
                &alloc::format!(
                    "safetensors has no dtype {}",
                    crate::safe::DtypeName(t.dtype())
                ),
            )
        })?;
        let bits = u128::from(t.dtype().bits) * u128::from(t.dtype().lanes);
        let numel: u128 = t.shape().iter().map(|&d| d as u128).product();
        if bits < 8 && numel.checked_mul(bits).is_some_and(|b| b % 8 != 0) {
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
                bytes: contiguous_bytes(t)?,
            },
        ));
    }
    safetensors::serialize(views.iter().map(|(n, v)| (n.as_str(), v)), None)
        .map_err(|e| Error::Unserializable(e.to_string()))
}

/// `Unserializable`, naming the tensor.
fn unserializable(name: &str, reason: &str) -> Error {
    Error::Unserializable(alloc::format!("tensor name {name:?}: {reason}"))
}

/// The bytes of a C-contiguous host tensor (any dtype), borrowed shared.
fn contiguous_bytes<K: Kind>(t: &Managed<K>) -> Result<ReadSlice<'_, u8>, Error> {
    crate::safe::host_viewable(t.device())?;
    if !t.is_contiguous() {
        return Err(Error::NotContiguous);
    }
    let len = t.nbytes();
    if len == 0 {
        // SAFETY: no bytes: a dangling aligned pointer for an empty slice, nothing to borrow.
        return Ok(unsafe {
            ReadSlice::new(
                core::ptr::NonNull::<u8>::dangling().as_ptr(),
                0,
                crate::safe::borrow::BorrowToken::EMPTY,
            )
        });
    }
    let ptr = t.data_ptr().cast::<u8>();
    if ptr.is_null() {
        return Err(Error::NullData);
    }
    let token = t.borrow_addressed(false)?;
    // SAFETY: host memory, non-NULL, contiguous: the elements occupy exactly `nbytes` bytes from
    // the first (validated at construction to lie in the producer's allocation), alive while
    // `t` is (the guard borrows it), every byte a valid u8, and borrowed shared above.
    Ok(unsafe { ReadSlice::new(ptr, len, token) })
}
