//! [`Described`]: a validated, non-owning view of a `DLTensor` someone else keeps alive.

use alloc::boxed::Box;
use core::ffi::c_void;

use crate::ffi::{DLDataType, DLDevice, DLTensor};
use crate::safe::import::views::{replace_external, External, Parts};
use crate::safe::import::{first_address, raw_shape, raw_strides, validate};
use crate::safe::Error;

/// Dimensions kept without a heap allocation (shape and strides side by side).
const INLINE: usize = 4;

/// Shape then strides, `ndim` of each.
enum Dims {
    Inline([i64; 2 * INLINE]),
    Heap(Box<[i64]>),
}

/// A validated copy of a non-owning `DLTensor`'s metadata, maybe with an external checker.
#[allow(dead_code)] // used by the layers above safe/
pub(crate) struct Described {
    /// The first element (`data + byte_offset`).
    first: *mut c_void,
    dtype: DLDataType,
    device: DLDevice,
    /// At most `MAX_NDIM` (validated).
    ndim: u16,
    /// Whether the producer gave strides.
    strided: bool,
    /// Whether exclusive borrows may be taken ([`Described::allow_writes`]).
    writable: bool,
    dims: Dims,
    external: Option<External>,
}

#[allow(dead_code)] // used by the layers above safe/
impl Described {
    /// Validates `t` and copies its metadata.
    ///
    /// # Safety
    /// `t.shape` and `t.strides`, when non-NULL and `t.ndim > 0`, point at `t.ndim` readable
    /// `i64`s (the DLPack contract).
    #[inline]
    pub(crate) unsafe fn new(t: &DLTensor) -> Result<Self, Error> {
        // SAFETY: this function's contract.
        unsafe { validate(t) }?;
        // SAFETY: validated: ndim is in range and the pointers are readable (the contract).
        let (shape, strides) = unsafe { (raw_shape(t), raw_strides(t)) };
        let ndim = shape.len();
        const _: () = assert!(crate::safe::TensorInfo::MAX_NDIM <= u16::MAX as usize);
        let dims = if ndim <= INLINE {
            // A fixed bound: a few moves, no `memcpy` call.
            let mut dims = [0i64; 2 * INLINE];
            for (i, &extent) in shape.iter().enumerate().take(INLINE) {
                dims[i] = extent;
            }
            if let Some(strides) = strides {
                for (i, &stride) in strides.iter().enumerate().take(INLINE) {
                    dims[ndim + i] = stride;
                }
            }
            Dims::Inline(dims)
        } else {
            let mut dims = alloc::vec![0i64; 2 * ndim];
            dims[..ndim].copy_from_slice(shape);
            if let Some(strides) = strides {
                dims[ndim..].copy_from_slice(strides);
            }
            Dims::Heap(dims.into_boxed_slice())
        };
        Ok(Described {
            first: first_address(t),
            dtype: t.dtype,
            device: t.device,
            ndim: ndim as u16,
            strided: strides.is_some(),
            writable: false,
            dims,
            external: None,
        })
    }

    /// Makes every view also borrow in `external`; this value releases its context once.
    ///
    /// # Safety
    /// As `Managed::set_external`.
    pub(crate) unsafe fn set_external(&mut self, external: External) {
        // SAFETY: the previous context was this value's alone (this function's contract).
        unsafe { replace_external(&mut self.external, Some(external)) }
    }

    fn ndim(&self) -> usize {
        usize::from(self.ndim)
    }

    /// Lets views take exclusive borrows (refused with [`Error::ReadOnly`] otherwise).
    ///
    /// # Safety
    /// The memory's owner lets it be written (its producer would export it without
    /// `READ_ONLY`) for as long as this value is used.
    pub(crate) unsafe fn allow_writes(&mut self) {
        self.writable = true;
    }

    fn dims(&self) -> &[i64] {
        match &self.dims {
            Dims::Inline(d) => &d[..2 * self.ndim()],
            Dims::Heap(d) => d,
        }
    }

    pub(crate) fn shape(&self) -> &[i64] {
        &self.dims()[..self.ndim()]
    }

    /// Strides in elements as the producer gave them (`None`: compact row-major).
    pub(crate) fn raw_strides(&self) -> Option<&[i64]> {
        self.strided.then(|| &self.dims()[self.ndim()..])
    }

    /// Strides in elements, compact ones where the producer gave none.
    pub(crate) fn strides(&self) -> alloc::borrow::Cow<'_, [i64]> {
        self.unchecked_parts().strides()
    }

    pub(crate) fn dtype(&self) -> DLDataType {
        self.dtype
    }

    pub(crate) fn device(&self) -> DLDevice {
        self.device
    }

    /// The address of the first element (NULL for a NULL data pointer).
    pub(crate) fn data_ptr(&self) -> *mut c_void {
        self.first
    }

    /// What the view checks ([`Parts::slice`], `strided`, `raw`) read of this value; for an
    /// exclusive borrow, [`Error::ReadOnly`] unless [`Described::allow_writes`] was called.
    #[inline(always)]
    pub(crate) fn parts(&self, exclusive: bool) -> Result<Parts<'_>, Error> {
        if exclusive && !self.writable {
            return Err(Error::ReadOnly);
        }
        Ok(self.unchecked_parts())
    }

    #[inline(always)]
    fn unchecked_parts(&self) -> Parts<'_> {
        Parts {
            first: self.first,
            shape: self.shape(),
            strides: self.raw_strides(),
            dtype: self.dtype,
            device: self.device,
            external: self.external,
        }
    }
}

impl Drop for Described {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this value's own context, released once, after every token that used it.
        unsafe { replace_external(&mut self.external, None) }
    }
}

// SAFETY: metadata and an address, dereferenced only under the `*_parts` contracts; external
// checker functions may run on any thread (`ExternalApi`).
unsafe impl Send for Described {}
// SAFETY: as above; `&Described` reads only copied metadata.
unsafe impl Sync for Described {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::DLDeviceType;
    use crate::safe::borrow::BorrowToken;
    use crate::safe::Element;
    use crate::safe::{cpu_device, dtype_f32};

    fn tensor(data: *mut c_void, shape: &mut [i64], strides: Option<&mut [i64]>) -> DLTensor {
        DLTensor {
            data,
            device: cpu_device(),
            ndim: shape.len() as i32,
            dtype: dtype_f32(),
            shape: shape.as_mut_ptr(),
            strides: strides.map_or(core::ptr::null_mut(), |s| s.as_mut_ptr()),
            byte_offset: 0,
        }
    }

    /// The three view checks as the typed arguments make them: `parts`, then the check.
    impl Described {
        /// # Safety
        /// The described memory stays alive while the pointer is used.
        unsafe fn slice_parts<T: Element>(
            &self,
            exclusive: bool,
        ) -> Result<(*mut T, usize, BorrowToken), Error> {
            // SAFETY: validated in `new`; alive by this function's contract.
            unsafe { self.parts(exclusive)?.slice::<T>(exclusive) }
        }

        /// # Safety
        /// As `slice_parts`.
        unsafe fn strided_parts<T: Element>(
            &self,
            exclusive: bool,
        ) -> Result<(crate::safe::import::strided::Normalized<T>, BorrowToken), Error> {
            // SAFETY: as in `slice_parts`.
            unsafe { self.parts(exclusive)?.strided::<T>(exclusive) }
        }

        fn raw_parts<T: Element>(&self, exclusive: bool) -> Result<(*mut T, BorrowToken), Error> {
            // SAFETY: the context is this value's until it drops, after every token.
            unsafe { self.parts(exclusive)?.raw::<T>(exclusive) }
        }
    }

    /// # Safety
    /// `t`'s shape and strides point at `ndim` integers.
    unsafe fn described(t: &DLTensor) -> Described {
        // SAFETY: forwarded.
        unsafe { Described::new(t) }.unwrap()
    }

    #[test]
    fn metadata_is_copied_inline_and_on_the_heap() {
        let mut data = [0f32; 64];
        for ndim in [0usize, 1, 3, 4, 5, 7] {
            let mut shape: alloc::vec::Vec<i64> = (0..ndim as i64).map(|i| i % 2 + 1).collect();
            let mut strides = crate::safe::compact_strides(&shape);
            let t = tensor(data.as_mut_ptr().cast(), &mut shape, Some(&mut strides));
            // SAFETY: the vectors above hold `ndim` integers each.
            let d = unsafe { described(&t) };
            // The producer's storage changes afterwards: the copy does not.
            let expected_shape = shape.clone();
            let expected_strides = strides.clone();
            shape.iter_mut().for_each(|e| *e = 99);
            strides.iter_mut().for_each(|e| *e = 99);
            assert_eq!(d.shape(), &expected_shape[..], "ndim {ndim}");
            assert_eq!(d.raw_strides(), Some(&expected_strides[..]), "ndim {ndim}");
            assert_eq!(d.dtype(), dtype_f32());
            assert_eq!(d.device(), cpu_device());
            assert_eq!(d.data_ptr(), data.as_mut_ptr().cast());
        }
    }

    #[test]
    fn null_strides_stay_none_and_byte_offset_moves_the_first_element() {
        let mut data = [1f32, 2.0, 3.0, 4.0];
        let mut shape = [3i64];
        let mut t = tensor(data.as_mut_ptr().cast(), &mut shape, None);
        t.byte_offset = 4;
        // SAFETY: `shape` holds one integer; no strides.
        let d = unsafe { described(&t) };
        assert_eq!(d.raw_strides(), None);
        assert_eq!(d.data_ptr(), data[1..].as_mut_ptr().cast());
        // SAFETY: `data` outlives every use of the slice below.
        let (ptr, len, _token) = unsafe { d.slice_parts::<f32>(false) }.unwrap();
        // SAFETY: checked and borrowed by `slice_parts`; `data` is alive.
        let read = unsafe { core::slice::from_raw_parts(ptr, len) };
        assert_eq!(read, &[2.0, 3.0, 4.0]);
    }

    /// An empty tensor's views (no bytes) borrow in neither the registry nor the checker, on
    /// every route; a non-empty one borrows in both, released with the kind taken.
    #[test]
    fn an_empty_view_takes_no_external_borrow() {
        use crate::safe::import::test_checker::{seen, TestChecker};
        static CHECKER: TestChecker = TestChecker::new();
        let mut data = [0f32; 1];
        let mut strides = [3i64, 1];
        // A writable view of `data` with the checker (its drops only count: shared is fine).
        let mut checked = |shape: &mut [i64]| {
            let t = tensor(data.as_mut_ptr().cast(), shape, Some(&mut strides));
            // SAFETY: two integers each; `data` outlives every use; the test's own writable array.
            let mut d = unsafe { described(&t) };
            // SAFETY: as above; the checker is static and keeps counts only.
            unsafe {
                d.allow_writes();
                d.set_external(CHECKER.external());
            }
            d
        };
        let d = checked(&mut [0, 3]);
        // SAFETY: `data` outlives every use.
        drop(unsafe { d.slice_parts::<f32>(true) }.unwrap());
        // SAFETY: as above.
        drop(unsafe { d.strided_parts::<f32>(true) }.unwrap());
        drop(d.raw_parts::<f32>(true).unwrap());
        assert_eq!(CHECKER.seen(), seen([0, 0], [0, 0], 0));
        let d = checked(&mut [1, 1]);
        // SAFETY: as above.
        drop(unsafe { d.strided_parts::<f32>(true) }.unwrap());
        drop(d.raw_parts::<f32>(false).unwrap());
        assert_eq!(CHECKER.seen(), seen([1, 1], [1, 1], 0));
    }

    #[test]
    fn invalid_metadata_is_refused() {
        let mut data = [0f32; 4];
        let mut shape = [-1i64];
        let t = tensor(data.as_mut_ptr().cast(), &mut shape, None);
        // SAFETY: `shape` holds one integer.
        let err = unsafe { Described::new(&t) }.err();
        assert_eq!(
            err,
            Some(Error::NegativeDim {
                axis: 0,
                extent: -1
            })
        );
        let mut shape = [2i64];
        let mut t = tensor(data.as_mut_ptr().cast(), &mut shape, None);
        t.ndim = -1;
        // SAFETY: a negative ndim is refused before anything is read.
        let err = unsafe { Described::new(&t) }.err();
        assert_eq!(err, Some(Error::NegativeNdim(-1)));
        let mut t = tensor(data.as_mut_ptr().cast(), &mut shape, None);
        t.shape = core::ptr::null_mut();
        // SAFETY: a NULL shape is refused before anything is read.
        assert_eq!(unsafe { Described::new(&t) }.err(), Some(Error::NullShape));
        let t = tensor(core::ptr::null_mut(), &mut shape, None);
        // SAFETY: `shape` holds one integer.
        assert_eq!(unsafe { Described::new(&t) }.err(), Some(Error::NullData));
    }

    #[test]
    fn slices_make_every_check_of_an_owner() {
        let mut data = [0f32; 8];
        let base = data.as_mut_ptr();
        let mut shape = [2i64, 2];
        let mut strides = [1i64, 2];
        let t = tensor(base.cast(), &mut shape, Some(&mut strides));
        // SAFETY: two integers each; `data` outlives the checks.
        let d = unsafe { described(&t) };
        assert_eq!(
            // SAFETY: as above.
            unsafe { d.slice_parts::<f32>(false) }.err(),
            Some(Error::NotContiguous)
        );
        assert_eq!(
            // SAFETY: as above.
            unsafe { d.slice_parts::<i32>(false) }.err(),
            Some(Error::DtypeMismatch {
                expected: crate::safe::dtype_i32(),
                found: dtype_f32()
            })
        );
        let mut shape = [2i64];
        let mut t = tensor(base.cast(), &mut shape, None);
        t.byte_offset = 1;
        // SAFETY: one integer; `data` outlives the checks.
        let d = unsafe { described(&t) };
        assert!(matches!(
            // SAFETY: as above.
            unsafe { d.slice_parts::<f32>(false) }.err(),
            Some(Error::Misaligned { align: 4, .. })
        ));
        let mut t = tensor(base.cast(), &mut shape, None);
        t.device.device_type = DLDeviceType::CUDA;
        // SAFETY: as above.
        let d = unsafe { described(&t) };
        assert!(matches!(
            // SAFETY: as above.
            unsafe { d.slice_parts::<f32>(false) }.err(),
            Some(Error::NotHostAccessible(_))
        ));
        let mut empty = [0i64, 3];
        let t = tensor(core::ptr::null_mut(), &mut empty, None);
        // SAFETY: two integers; an empty tensor is never read.
        let mut d = unsafe { described(&t) };
        // SAFETY: a test's own (empty) tensor.
        unsafe { d.allow_writes() };
        // SAFETY: as above.
        let (_, len, _) = unsafe { d.slice_parts::<f32>(true) }.unwrap();
        assert_eq!(len, 0);
    }

    #[test]
    fn exclusive_borrows_need_writes_allowed() {
        let mut data = [0f32; 4];
        let mut shape = [2i64, 2];
        let t = tensor(data.as_mut_ptr().cast(), &mut shape, None);
        // SAFETY: two integers; `data` outlives every use.
        let mut d = unsafe { described(&t) };
        assert_eq!(
            // SAFETY: as above.
            unsafe { d.slice_parts::<f32>(true) }.err(),
            Some(Error::ReadOnly)
        );
        assert_eq!(
            // SAFETY: as above.
            unsafe { d.strided_parts::<f32>(true) }.err(),
            Some(Error::ReadOnly)
        );
        assert_eq!(d.raw_parts::<f32>(true).err(), Some(Error::ReadOnly));
        // SAFETY: the test's own writable array.
        unsafe { d.allow_writes() };
        for exclusive in [true, false] {
            // SAFETY: as above.
            let (_, len, token) = unsafe { d.slice_parts::<f32>(exclusive) }.unwrap();
            assert_eq!(len, 4);
            drop(token);
            // SAFETY: as above.
            drop(unsafe { d.strided_parts::<f32>(exclusive) }.unwrap());
            drop(d.raw_parts::<f32>(exclusive).unwrap());
        }
    }

    #[test]
    fn slices_hold_registry_borrows_of_their_bytes() {
        let mut data = [0f32; 4];
        let mut shape = [4i64];
        let t = tensor(data.as_mut_ptr().cast(), &mut shape, None);
        // SAFETY: one integer; `data` outlives every use.
        let mut d = unsafe { described(&t) };
        // SAFETY: the test's own writable array.
        unsafe { d.allow_writes() };
        // SAFETY: as above.
        let shared = unsafe { d.slice_parts::<f32>(false) }.unwrap();
        assert_eq!(
            // SAFETY: as above.
            unsafe { d.slice_parts::<f32>(true) }.err(),
            Some(Error::AlreadyBorrowed { exclusive: true })
        );
        // SAFETY: as above.
        let second = unsafe { d.slice_parts::<f32>(false) }.unwrap();
        assert_eq!(second.1, 4);
        drop((shared, second));
        // SAFETY: as above.
        let exclusive = unsafe { d.slice_parts::<f32>(true) }.unwrap();
        assert_eq!(
            // SAFETY: as above.
            unsafe { d.slice_parts::<f32>(false) }.err(),
            Some(Error::AlreadyBorrowed { exclusive: false })
        );
        drop(exclusive);
    }

    /// Every view of a `Described` with an external checker takes its borrow after the
    /// registry's, of the same kind, and gives it back with the view; a refusal refuses the view
    /// and leaves no registry borrow; the context is released once, when the value drops or
    /// another replaces it.
    #[test]
    fn an_external_checker_sees_every_view_and_its_context_is_released_once() {
        use crate::safe::import::test_checker::{seen, TestChecker};
        static CHECKER: TestChecker = TestChecker::new();
        let mut data = [1f32, 2.0, 3.0, 4.0];
        let mut shape = [2i64, 2];
        let mut strides = [2i64, 1];
        let t = tensor(data.as_mut_ptr().cast(), &mut shape, Some(&mut strides));
        // SAFETY: two integers each; `data` outlives every use.
        let mut d = unsafe { described(&t) };
        // SAFETY: the test's own writable array; the checker is static and keeps counts only.
        unsafe {
            d.allow_writes();
            d.set_external(CHECKER.external());
        }
        // SAFETY: as above.
        let (first, len, token) = unsafe { d.slice_parts::<f32>(false) }.unwrap();
        assert_eq!((first.cast::<c_void>(), len), (d.data_ptr(), 4));
        assert_eq!(CHECKER.seen(), seen([1, 0], [0, 0], 0));
        drop(token);
        assert_eq!(CHECKER.seen(), seen([1, 0], [1, 0], 0));
        // SAFETY: as above.
        drop(unsafe { d.slice_parts::<f32>(true) }.unwrap());
        assert_eq!(CHECKER.seen(), seen([1, 1], [1, 1], 0));
        for exclusive in [false, true] {
            // SAFETY: as above.
            drop(unsafe { d.strided_parts::<f32>(exclusive) }.unwrap());
            drop(d.raw_parts::<f32>(exclusive).unwrap());
        }
        assert_eq!(CHECKER.seen(), seen([3, 3], [3, 3], 0));
        CHECKER.refuse(true);
        for exclusive in [false, true] {
            let refused = Some(Error::AlreadyBorrowed { exclusive });
            // SAFETY: as above.
            assert_eq!(unsafe { d.slice_parts::<f32>(exclusive) }.err(), refused);
            // SAFETY: as above.
            assert_eq!(unsafe { d.strided_parts::<f32>(exclusive) }.err(), refused);
            assert_eq!(d.raw_parts::<f32>(exclusive).err(), refused);
        }
        CHECKER.refuse(false);
        // The refused views left no registry borrow behind.
        // SAFETY: as above.
        drop(unsafe { d.slice_parts::<f32>(true) }.unwrap());
        assert_eq!(CHECKER.seen(), seen([3, 4], [3, 4], 0));
        // SAFETY: as above.
        unsafe { d.set_external(CHECKER.external()) };
        assert_eq!(
            CHECKER.seen().dropped,
            1,
            "the replaced context is released"
        );
        drop(d);
        assert_eq!(CHECKER.seen(), seen([3, 4], [3, 4], 2));
    }
}
