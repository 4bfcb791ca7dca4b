//! [`TensorInfo`]: a tensor's raw metadata for export, and its validation.

use alloc::vec::Vec;
use core::ffi::c_void;

use crate::ffi::{DLDataType, DLDevice, DLDeviceType};
use crate::safe::borrow::BorrowToken;
use crate::safe::layout::{check, Extent};
use crate::safe::Error;

/// A tensor's metadata for [`pack`](crate::safe::pack), which takes its keepalive separately.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Base pointer of the data; the first element is at `data + byte_offset`.
    pub data: *mut c_void,
    /// Where the memory lives.
    pub device: DLDevice,
    /// Element type.
    pub dtype: DLDataType,
    /// Extent of each dimension.
    pub shape: Vec<i64>,
    /// Step of each dimension in elements; `None` means compact row-major.
    pub strides: Option<Vec<i64>>,
    /// Offset in bytes from `data` to the first element.
    pub byte_offset: u64,
}

// SAFETY: plain metadata; the crate never dereferences the pointer on its own.
unsafe impl Send for TensorInfo {}
// SAFETY: as above; `&TensorInfo` gives no access to the pointee.
unsafe impl Sync for TensorInfo {}

impl TensorInfo {
    /// The largest `ndim` this crate accepts (numpy allows 64, torch fewer).
    pub const MAX_NDIM: usize = crate::safe::error::MAX_NDIM;

    /// Metadata of a compact row-major tensor.
    pub fn contiguous(
        data: *mut c_void,
        device: DLDevice,
        dtype: DLDataType,
        shape: Vec<i64>,
    ) -> Self {
        TensorInfo {
            data,
            device,
            dtype,
            shape,
            strides: None,
            byte_offset: 0,
        }
    }

    /// Metadata of a tensor with explicit strides, in elements.
    pub fn strided(
        data: *mut c_void,
        device: DLDevice,
        dtype: DLDataType,
        shape: Vec<i64>,
        strides: Vec<i64>,
    ) -> Self {
        TensorInfo {
            strides: Some(strides),
            ..Self::contiguous(data, device, dtype, shape)
        }
    }

    /// The same metadata with the first element `byte_offset` bytes after `data`.
    pub fn with_byte_offset(mut self, byte_offset: u64) -> Self {
        self.byte_offset = byte_offset;
        self
    }

    /// Validates the metadata (strides, extents, dtype, overflow, NULL data): the element count.
    pub fn numel(&self) -> Result<usize, Error> {
        self.extent().map(|extent| extent.numel)
    }

    /// The validation of [`TensorInfo::numel`], returning the addressed element range too.
    pub(crate) fn extent(&self) -> Result<Extent, Error> {
        check(
            &self.shape,
            self.strides.as_deref(),
            self.dtype,
            self.byte_offset,
            self.data.is_null(),
        )
    }
}

/// Metadata that passed [`TensorInfo::numel`]'s checks, with its addressed range.
#[derive(Debug)]
pub(crate) struct Validated {
    info: TensorInfo,
    extent: Extent,
}

#[allow(dead_code)] // parts are crate API for the layers above safe/ only
impl Validated {
    pub(crate) fn new(info: TensorInfo) -> Result<Self, Error> {
        let extent = info.extent()?;
        Ok(Validated { info, extent })
    }

    /// `info` with the extent a validation of it returned.
    ///
    /// # Safety
    /// `extent` is what `info.extent()` returns (`Ok`) for this very `info`.
    pub(crate) unsafe fn new_unchecked(info: TensorInfo, extent: Extent) -> Self {
        Validated { info, extent }
    }

    pub(crate) fn info(&self) -> &TensorInfo {
        &self.info
    }

    pub(crate) fn extent(&self) -> Extent {
        self.extent
    }

    pub(crate) fn into_info(self) -> TensorInfo {
        self.info
    }

    /// Borrows every byte the metadata addresses: nothing if empty, or outside the process's one
    /// address space (host, CUDA, ROCm), where pointers of other devices may collide.
    pub(crate) fn borrow(&self, exclusive: bool) -> Result<BorrowToken, Error> {
        let (info, extent) = (&self.info, self.extent);
        let t = info.device.device_type;
        let unified = t.is_host_accessible() || t == DLDeviceType::CUDA || t == DLDeviceType::ROCM;
        if extent.numel == 0 || !unified {
            return Ok(BorrowToken::EMPTY);
        }
        // Validated: the addressed bytes lie within an isize of `data`.
        let first = (info.data as usize).wrapping_add(info.byte_offset as usize);
        let bits = crate::safe::element_bits(info.dtype);
        BorrowToken::acquire_elements(first, extent.min, extent.max, bits, exclusive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safe::{cpu_device, dtype_f32, dtype_u8, Error};
    use alloc::vec;

    /// The borrow an export of `info` holds (see [`Validated::borrow`]).
    fn borrow_described(info: &TensorInfo, exclusive: bool) -> Result<BorrowToken, Error> {
        Validated::new(info.clone())?.borrow(exclusive)
    }

    /// The described range is exactly `[first, end)`: both ends conflict, the bytes around
    /// them do not.
    fn assert_range(info: &TensorInfo, first: usize, end: usize) {
        let _held = borrow_described(info, false).unwrap();
        let probe = |a: usize, b: usize| BorrowToken::acquire(a, b, true);
        assert!(probe(first, first + 1).is_err(), "first byte {first:#x}");
        assert!(probe(end - 1, end).is_err(), "last byte {:#x}", end - 1);
        assert!(probe(first - 1, first).is_ok(), "byte before {first:#x}");
        assert!(probe(end, end + 1).is_ok(), "byte after {end:#x}");
    }

    #[test]
    fn cuda_and_rocm_memory_is_registered_other_devices_are_not() {
        use crate::ffi::{DLDevice, DLDeviceType};
        // A derived export of device memory holds a shared borrow, so that an exclusive view of
        // an import of it (a mutable cudarc view) is refused while the class may read it.
        let base = 0x7_0000usize;
        for (t, registered) in [
            (DLDeviceType::CUDA, true),
            (DLDeviceType::ROCM, true),
            (DLDeviceType::CUDA_MANAGED, true),
            (DLDeviceType::OPENCL, false),
            (DLDeviceType::VULKAN, false),
        ] {
            let device = DLDevice {
                device_type: t,
                device_id: 0,
            };
            let info = TensorInfo::contiguous(base as *mut _, device, dtype_u8(), vec![16]);
            let held = borrow_described(&info, false).unwrap();
            assert_eq!(
                BorrowToken::acquire(base, base + 16, true).is_err(),
                registered,
                "{t:?}"
            );
            drop(held);
            assert!(BorrowToken::acquire(base, base + 16, true).is_ok());
        }
    }

    #[test]
    fn described_ranges_cover_exactly_the_addressed_bytes() {
        let base = 0x5_0000usize;
        // 2x3 f32, compact: 24 bytes.
        let c = TensorInfo::contiguous(base as *mut _, cpu_device(), dtype_f32(), vec![2, 3]);
        assert_range(&c, base, base + 24);
        // Negative strides with a byte offset: [2, 3] strides [-3, -1] starting 20 bytes in.
        let n = TensorInfo::strided(
            base as *mut _,
            cpu_device(),
            dtype_f32(),
            vec![2, 3],
            vec![-3, -1],
        )
        .with_byte_offset(20);
        assert_range(&n, base, base + 24);
        // Broadcast: stride 0 on a long axis addresses one row.
        let b = TensorInfo::strided(
            base as *mut _,
            cpu_device(),
            dtype_u8(),
            vec![5, 4],
            vec![0, 1],
        );
        assert_range(&b, base, base + 4);
        // Empty: nothing registered.
        let e = TensorInfo::contiguous(base as *mut _, cpu_device(), dtype_u8(), vec![0, 4]);
        let _held = borrow_described(&e, true).unwrap();
        assert!(BorrowToken::acquire(base, base + 4, true).is_ok());
        // Mismatched strides are refused.
        let bad = TensorInfo::strided(
            base as *mut _,
            cpu_device(),
            dtype_u8(),
            vec![2],
            vec![1, 1],
        );
        assert!(matches!(
            borrow_described(&bad, false),
            Err(Error::StridesLength { .. })
        ));
    }
}
