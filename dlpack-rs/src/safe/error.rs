//! The one error type of the safe layer.

use core::fmt;

use crate::ffi::{DLDataType, DLDevice, DLPackVersion};

/// The largest `ndim` accepted, public as [`TensorInfo::MAX_NDIM`](crate::safe::TensorInfo::MAX_NDIM).
pub(crate) const MAX_NDIM: usize = 1024;

/// Everything that can be wrong with a tensor handed to, or built by, the safe layer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A NULL managed-tensor pointer was given.
    NullPointer,
    /// The producer's ABI major version is not one this crate reads (only 1 is).
    UnsupportedVersion(DLPackVersion),
    /// The producer set flag bits its version does not define.
    UnknownFlags {
        /// The producer's version.
        version: DLPackVersion,
        /// The undefined bits.
        bits: u64,
    },
    /// `ndim` is negative.
    NegativeNdim(i32),
    /// `ndim` is larger than [`TensorInfo::MAX_NDIM`](crate::safe::TensorInfo::MAX_NDIM).
    TooManyDims(i32),
    /// `ndim > 0` but the shape pointer is NULL.
    NullShape,
    /// A dimension has a negative extent.
    NegativeDim {
        /// The axis.
        axis: usize,
        /// Its extent.
        extent: i64,
    },
    /// Shape and strides do not have the same number of dimensions.
    StridesLength {
        /// Number of dimensions of the shape.
        shape: usize,
        /// Number of strides given.
        strides: usize,
    },
    /// The element count, byte size or addressed range overflows.
    Overflow,
    /// The data pointer is NULL but the tensor has elements.
    NullData,
    /// The dtype is malformed (zero bits or lanes, or bits the type code forbids).
    InvalidDtype(DLDataType),
    /// A sub-byte dtype was flagged `IS_SUBBYTE_TYPE_PADDED`; only packed data is read.
    PaddedSubByte(DLDataType),
    /// A packed view or export was asked for a dtype wider than 8 bits.
    NotPacked(DLDataType),
    /// A packed export's bytes are not the number its shape needs.
    PackedLength {
        /// Bytes given.
        bytes: usize,
        /// Elements the shape has.
        numel: usize,
        /// Bytes those elements need, packed: `ceil(numel * bits * lanes / 8)`.
        needed: usize,
    },
    /// A typed view asked for another element type than the tensor holds.
    DtypeMismatch {
        /// The element type asked for.
        expected: DLDataType,
        /// The tensor's element type.
        found: DLDataType,
    },
    /// The layout is not compact row-major, as slice, packed and CUDA views and packing need.
    NotContiguous,
    /// The memory is not `kDLCPU` memory, which views and copies need.
    NotHostAccessible(DLDevice),
    /// A mutable view, or a legacy export (it has no flags), of a read-only tensor was asked for.
    ReadOnly,
    /// The first element is not aligned for the element type.
    Misaligned {
        /// Required alignment in bytes.
        align: usize,
        /// The address of the first element.
        address: usize,
    },
    /// A bool tensor holds a byte that is neither 0 nor 1.
    InvalidBool,
    /// The shape and strides address elements outside the exported buffer.
    OutOfBounds {
        /// Elements the buffer holds.
        len: usize,
        /// Lowest element index addressed (may be negative).
        min: i64,
        /// Highest element index addressed.
        max: i64,
    },
    /// A mutable view was asked for, but two indices address the same element.
    Overlapping,
    /// Another view holds overlapping memory; see [the borrow registry](super#the-borrow-registry).
    AlreadyBorrowed {
        /// Whether the refused borrow was exclusive (a mutable view).
        exclusive: bool,
    },
    /// Memory could not be allocated (for a buffer, a copy, or a registry entry).
    OutOfMemory,
    /// A copy of a tensor of sub-byte elements was asked for.
    SubByteCopy,
    /// The tensor is not on the device asked for.
    DeviceMismatch {
        /// The device asked for.
        expected: DLDevice,
        /// The tensor's device.
        found: DLDevice,
    },
    /// A call into a device runtime (the CUDA driver, say) failed.
    Device {
        /// The call, or what it was for.
        call: &'static str,
        /// The runtime's error code.
        code: i64,
    },
    /// A conversion to or from safetensors, candle or burn is impossible; the message says why.
    Unserializable(alloc::string::String),
    /// A `#[derive(IntoDLPack)]` struct's layout addresses bytes outside its data field.
    OutsideBuffer {
        /// The struct.
        type_name: &'static str,
        /// Its data field.
        field: &'static str,
        /// The first byte addressed, relative to the field (negative: before it).
        first: i64,
        /// One past the last byte addressed.
        end: i64,
        /// The bytes the field holds.
        len: u64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NullPointer => f.write_str("managed tensor pointer is NULL"),
            Error::UnsupportedVersion(v) => write!(
                f,
                "unsupported DLPack version {v}: this consumer reads major version {}",
                crate::ffi::DLPACK_MAJOR_VERSION
            ),
            Error::UnknownFlags { version, bits } => {
                write!(f, "flag bits {bits:#x} are not defined by DLPack {version}")
            }
            Error::NegativeNdim(n) => write!(f, "ndim is negative ({n})"),
            Error::TooManyDims(n) => {
                write!(f, "ndim {n} exceeds the supported maximum of {}", MAX_NDIM)
            }
            Error::NullShape => f.write_str("shape pointer is NULL but ndim > 0"),
            Error::NegativeDim { axis, extent } => {
                write!(f, "dimension {axis} has negative extent {extent}")
            }
            Error::StridesLength { shape, strides } => write!(
                f,
                "shape has {shape} dimensions but {strides} strides were given"
            ),
            Error::Overflow => f.write_str("tensor size or addressed memory range overflows"),
            Error::NullData => f.write_str("data pointer is NULL but the tensor is not empty"),
            Error::InvalidDtype(d) => {
                write!(
                    f,
                    "invalid dtype: code {:?}, bits {}, lanes {}",
                    d.code, d.bits, d.lanes
                )?;
                match d.code.rule() {
                    Some(rule) => write!(f, " ({:?} must be {rule})", d.code),
                    None => Ok(()),
                }
            }
            Error::DtypeMismatch { expected, found } => write!(
                f,
                "dtype mismatch: asked for {} ({expected}), tensor holds {} ({found})",
                expected.name(),
                found.name()
            ),
            Error::PaddedSubByte(d) => write!(
                f,
                "sub-byte dtype {} ({d}) flagged IS_SUBBYTE_TYPE_PADDED: only packed sub-byte \
                 data is read (ask the producer for packed data)",
                d.name()
            ),
            Error::PackedLength {
                bytes,
                numel,
                needed,
            } => write!(
                f,
                "{numel} packed elements need {needed} bytes, the buffer has {bytes}"
            ),
            Error::NotPacked(d) => write!(
                f,
                "dtype {} ({d}) has values wider than 8 bits: view it typed, not packed",
                d.name()
            ),
            Error::NotContiguous => f.write_str("tensor is not C-contiguous"),
            Error::NotHostAccessible(d) => write!(
                f,
                "memory on device {d} is not accessible from the CPU without \
                 synchronisation (views and copies need kDLCPU memory)"
            ),
            Error::ReadOnly => f.write_str("tensor is read-only"),
            Error::Misaligned { align, address } => write!(
                f,
                "data at {address:#x} is not aligned to {align} bytes for the element type"
            ),
            Error::InvalidBool => f.write_str("bool tensor holds a byte other than 0 or 1"),
            Error::OutOfBounds { len, min, max } => write!(
                f,
                "shape and strides address elements {min}..={max}, outside the buffer of {len}"
            ),
            Error::AlreadyBorrowed { exclusive: true } => f.write_str(
                "the tensor's memory is already borrowed by another view: a mutable view needs \
                 it alone (drop the other views, or copy)",
            ),
            Error::AlreadyBorrowed { exclusive: false } => f.write_str(
                "the tensor's memory is mutably borrowed by another view: drop that view first",
            ),
            Error::OutOfMemory => f.write_str("out of memory"),
            Error::SubByteCopy => f.write_str("cannot copy a tensor of a sub-byte element type"),
            Error::Overlapping => {
                f.write_str("strides address some elements more than once: no mutable view")
            }
            Error::DeviceMismatch { expected, found } => {
                write!(f, "tensor is on {found}, not on {expected}")
            }
            Error::Unserializable(message) => f.write_str(message),
            Error::OutsideBuffer {
                type_name,
                field,
                first,
                end,
                len,
            } => write!(
                f,
                "`{type_name}`: its shape, strides and byte offset address bytes {first}..{end} \
                 of field `{field}`, which holds {len} bytes"
            ),
            Error::Device { call, code } => {
                write!(f, "device runtime call {call} failed (error {code})")
            }
        }
    }
}

impl core::error::Error for Error {}
