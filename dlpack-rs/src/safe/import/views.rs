//! Borrow-checked views of a managed tensor's elements: the checks a view needs (dtype,
//! host memory, layout, alignment, valid bytes) and the registry borrow of exactly the bytes the
//! elements address, with an external checker's borrow on top (rust-numpy's table).

use core::ffi::c_void;
use core::ptr::NonNull;

use crate::ffi::{DLDataType, DLDevice, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED};
use crate::safe::borrow::guard::{ReadSlice, WriteSlice};
use crate::safe::borrow::BorrowToken;
use crate::safe::import::layout::is_c_contiguous;
use crate::safe::import::{Kind, Managed, ManagedTensorVersioned};
use crate::safe::{Element, Error};

/// A second borrow checker an owner's views must satisfy (see `Managed::set_external`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct External {
    /// What the checker does.
    pub(crate) api: &'static ExternalApi,
    /// What it keys by (an owned reference the owner releases with `drop_ctx`).
    pub(crate) ctx: *mut c_void,
}

/// The functions of an external borrow checker. None may unwind; each may run on any thread.
#[derive(Debug)]
pub(crate) struct ExternalApi {
    /// Takes a shared (`false`) or exclusive (`true`) borrow of the context's memory, or refuses
    /// with the error to report.
    pub(crate) acquire: unsafe fn(*mut c_void, bool) -> Result<(), Error>,
    /// Releases one borrow `acquire` took with the same arguments.
    pub(crate) release: unsafe fn(*mut c_void, bool),
    /// Releases the context itself, once, when the owner lets go of it.
    pub(crate) drop_ctx: unsafe fn(*mut c_void),
}

impl<K: Kind> Managed<K> {
    /// Makes every view of this owner also take a borrow in `external` (after the registry's,
    /// released with it), and hands its context to the owner, which releases it once.
    ///
    /// # Safety
    ///
    /// `external.ctx` stays valid for `external.api`'s functions until `drop_ctx` is called on
    /// it, and this owner is the only one to call `drop_ctx` on it.
    #[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
    pub(crate) unsafe fn set_external(&mut self, external: External) {
        if let Some(old) = self.external.replace(external) {
            // SAFETY: the previous context was this owner's alone (this function's contract).
            unsafe { (old.api.drop_ctx)(old.ctx) };
        }
    }

    /// The external checker this owner's views satisfy, if any (its context stays this owner's).
    pub(crate) fn external(&self) -> Option<External> {
        self.external
    }

    /// Adds the external checker's borrow to a registry token just taken for a view.
    pub(in crate::safe) fn with_external(
        &self,
        token: BorrowToken,
        exclusive: bool,
    ) -> Result<BorrowToken, Error> {
        // SAFETY: the context stays valid until this owner drops it (`set_external`), and every
        // view (and so every token) borrows this owner.
        unsafe { take_external(self.external(), token, exclusive) }
    }

    /// The first element of a non-empty tensor as a `*mut T`: non-NULL and aligned for `T`.
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))] // the CUDA import's
    pub(crate) fn first_element<T: Element>(&self) -> Result<*mut T, Error> {
        first_of::<T>(self.data_ptr())
    }

    /// Registers a borrow of the bytes the tensor's elements address (from the lowest to the
    /// highest element the strides reach, on the elements' progression: see the module docs).
    /// Nothing is registered for an empty tensor.
    #[cfg_attr(not(feature = "ndarray"), allow(dead_code))]
    pub(crate) fn borrow_addressed(&self, exclusive: bool) -> Result<BorrowToken, Error> {
        let token = addressed_token(
            self.data_ptr(),
            self.shape(),
            &self.strides(),
            self.dtype(),
            exclusive,
        )?;
        self.with_external(token, exclusive)
    }

    /// Checks that a slice of `T` over this tensor is sound and borrows it, returning its first
    /// element, its length and the borrow.
    pub(crate) fn slice_parts<T: Element>(
        &self,
        exclusive: bool,
    ) -> Result<(*mut T, usize, BorrowToken), Error> {
        let t = self.raw_tensor();
        // SAFETY: the metadata was validated at construction and the memory lives until the
        // deleter runs, which cannot happen while `self` is borrowed.
        unsafe {
            contiguous_slice_parts::<T>(
                self.data_ptr(),
                self.shape(),
                self.raw_strides(),
                t.dtype,
                t.device,
                exclusive,
                |token| self.with_external(token, exclusive),
            )
        }
    }

    /// The elements as a shared slice (a guard that derefs to `[T]`), when the tensor is
    /// host-accessible, C-contiguous, of `T`'s dtype, aligned for `T` and (for `bool`) holds
    /// only 0 and 1. Refused with [`Error::AlreadyBorrowed`] while a mutable view of any of
    /// these bytes exists, through this owner or any other.
    pub fn as_slice<T: Element>(&self) -> Result<ReadSlice<'_, T>, Error> {
        let (ptr, len, token) = self.slice_parts::<T>(false)?;
        // SAFETY: checked and borrowed (shared) by `slice_parts`; the guard borrows `self`, so
        // the memory outlives it.
        Ok(unsafe { ReadSlice::new(ptr, len, token) })
    }

    /// The elements as a mutable slice (a guard that derefs to `[T]`): as [`Managed::as_slice`],
    /// and the tensor must not be read-only. Refused with [`Error::AlreadyBorrowed`] while any
    /// other view of these bytes exists, through this owner or any other.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<WriteSlice<'_, T>, Error> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let (ptr, len, token) = self.slice_parts::<T>(true)?;
        // SAFETY: checked and borrowed exclusively by `slice_parts`; the producer allows writes
        // (no READ_ONLY flag); the guard borrows `self` mutably, so the memory outlives it and
        // this owner hands out no other view meanwhile.
        Ok(unsafe { WriteSlice::new(ptr, len, token) })
    }

    /// A compact, row-major, 64-byte aligned host copy of the elements, flagged `IS_COPIED`
    /// (writable: it is nobody else's). Holds a shared borrow of the source while copying, so it
    /// is refused with [`Error::AlreadyBorrowed`] while a mutable view of it exists.
    ///
    /// ```
    /// use dlpack_rs::safe::Export;
    ///
    /// let t = Export::new(vec![1u16, 2, 3, 4, 5, 6]).shape(&[2, 3]).strides(&[1, 2]).versioned()?;
    /// let c = t.copy()?;
    /// assert!(c.is_copied() && c.is_contiguous());
    /// assert_eq!(c.as_slice::<u16>()?, &[1, 3, 5, 2, 4, 6]);
    /// # Ok::<(), dlpack_rs::safe::Error>(())
    /// ```
    pub fn copy(&self) -> Result<ManagedTensorVersioned, Error> {
        host_viewable(self.device())?;
        let _source = self.borrow_addressed(false)?;
        let source = crate::safe::Validated::new(self.tensor_info())?;
        // SAFETY: host memory alive while `self` is, and the shared borrow above keeps writers
        // of this crate away.
        let (storage, copy) = unsafe { crate::safe::copy_described(&source) }?;
        // SAFETY: `copy` describes the new storage, which the keepalive owns alone; writable.
        unsafe {
            crate::safe::pack_validated::<DLManagedTensorVersioned, _>(
                storage,
                copy,
                DLPACK_FLAG_BITMASK_IS_COPIED,
                crate::safe::Readers::ExportOnly,
                Some(crate::safe::AlignedBytes::as_mut_ptr),
            )
        }
    }
}

/// Adds `external`'s borrow (when there is one) to a registry token just taken for a view: the
/// token then gives both back.
///
/// # Safety
///
/// `external.ctx` stays valid for `external.api`'s functions while the returned token lives (its
/// holder keeps the context's owner alive longer than the token).
#[inline]
pub(crate) unsafe fn take_external(
    external: Option<External>,
    token: BorrowToken,
    exclusive: bool,
) -> Result<BorrowToken, Error> {
    match external {
        None => Ok(token),
        // SAFETY: forwarded from this function's contract.
        Some(external) => unsafe { take_some_external(external, token, exclusive) },
    }
}

/// [`take_external`] with a checker.
///
/// # Safety
///
/// As [`take_external`].
#[inline(never)]
unsafe fn take_some_external(
    external: External,
    token: BorrowToken,
    exclusive: bool,
) -> Result<BorrowToken, Error> {
    // SAFETY: a live context (this function's contract).
    unsafe { (external.api.acquire)(external.ctx, exclusive) }?;
    Ok(token.with_external(crate::safe::borrow::ExternalHold {
        release: external.api.release,
        ctx: external.ctx,
        exclusive,
    }))
}

/// The checks and the borrow of a C-contiguous slice of `T` over a tensor, for an owner and for
/// a non-owning view alike: `T`'s dtype, plain CPU memory, C-contiguous, non-NULL and aligned
/// (unless empty); then the registry borrow, `more` (a second checker's borrow on top of it),
/// and, for elements with invalid bit patterns (`bool`), the bytes. Returns the first element,
/// the length and the borrow.
///
/// # Safety
///
/// `first` (the address of the first element), `shape`, `strides`, `dtype` and `device` describe
/// a tensor validated by `layout::check` whose memory stays alive and in place while the returned
/// pointer is used.
#[inline(always)]
pub(crate) unsafe fn contiguous_slice_parts<T: Element>(
    first: *mut c_void,
    shape: &[i64],
    strides: Option<&[i64]>,
    dtype: DLDataType,
    device: DLDevice,
    exclusive: bool,
    more: impl FnOnce(BorrowToken) -> Result<BorrowToken, Error>,
) -> Result<(*mut T, usize, BorrowToken), Error> {
    dtype_is::<T>(dtype)?;
    host_viewable(device)?;
    if !strides.is_none_or(|s| is_c_contiguous(shape, s)) {
        return Err(Error::NotContiguous);
    }
    // Validated: the product does not overflow unless a zero extent makes the tensor empty.
    if shape.contains(&0) {
        return Ok((NonNull::<T>::dangling().as_ptr(), 0, BorrowToken::EMPTY));
    }
    let len: usize = shape.iter().map(|&d| d as usize).product();
    let ptr = first_of::<T>(first)?;
    // Borrow before reading anything: no exclusive view of these bytes exists from here on.
    // Contiguous: the bytes are exactly `len` elements from the first.
    let start = ptr as usize;
    let token = BorrowToken::acquire(
        start,
        start.wrapping_add(len * core::mem::size_of::<T>()),
        exclusive,
    )?;
    let token = more(token)?;
    // SAFETY: host-accessible, non-NULL, aligned, contiguous memory of `len` elements of T's
    // dtype (validated not to overflow), alive by this function's contract, and borrowed above
    // so no view elsewhere writes it.
    let bytes =
        unsafe { core::slice::from_raw_parts(ptr.cast::<u8>(), len * core::mem::size_of::<T>()) };
    if !T::is_valid_bytes(bytes) {
        return Err(Error::InvalidBool);
    }
    Ok((ptr, len, token))
}

/// Registers a borrow of the bytes a validated tensor's elements address, from the lowest to
/// the highest element its strides reach: those of the elements' progression (the gcd of the
/// byte strides apart, `safe::overlap::Span`), or the whole range for sub-byte elements;
/// nothing for an empty tensor. `first` is the address of the first element (never
/// dereferenced).
pub(crate) fn addressed_token(
    first: *mut c_void,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    exclusive: bool,
) -> Result<BorrowToken, Error> {
    if shape.contains(&0) {
        return Ok(BorrowToken::EMPTY);
    }
    let (mut low, mut high) = (0i64, 0i64);
    for (&extent, &stride) in shape.iter().zip(strides.iter()) {
        // Validated (`layout::check`): the addressed range does not overflow.
        let span = stride.wrapping_mul(extent - 1);
        if span < 0 {
            low = low.wrapping_add(span);
        } else {
            high = high.wrapping_add(span);
        }
    }
    let bits = crate::safe::dtype::element_bits(dtype);
    if bits % 8 != 0 {
        // Sub-byte elements share bytes with their neighbours: the whole range.
        return BorrowToken::acquire_elements(first as usize, low, high, bits, exclusive);
    }
    // Every element starts a multiple of the gcd of the byte strides (of the axes it steps
    // along) from the lowest one: the borrow names those elements' bytes alone, so views of
    // interleaved elements (`z[::2]`, `z[1::2]`) do not conflict (`safe::overlap`).
    let width = (bits / 8) as usize;
    let period = shape
        .iter()
        .zip(strides.iter())
        .filter(|&(&extent, _)| extent > 1)
        .fold(0usize, |g, (_, &stride)| {
            crate::safe::borrow::overlap::gcd(
                g,
                (stride.unsigned_abs() as usize).wrapping_mul(width),
            )
        });
    // Validated (`layout::check`): the addressed bytes lie within an isize of `first`.
    let start = (first as usize).wrapping_add_signed(low as isize * width as isize);
    let end = (first as usize).wrapping_add_signed((high as isize + 1) * width as isize);
    BorrowToken::acquire_strided(start, end, period, width, exclusive)
}

/// Whether safe code may read (or write) the memory of a tensor on `device` from the host: only
/// plain CPU memory. Device memory is not addressable, and pinned or managed memory
/// (`CUDA_HOST`, `ROCM_HOST`, `CUDA_MANAGED`), though addressable, may still be written by the
/// producer's queued device work, which a host view would race (nothing here can wait for it).
pub(crate) fn host_viewable(device: crate::ffi::DLDevice) -> Result<(), Error> {
    if device.device_type.is_host_viewable() {
        Ok(())
    } else {
        Err(Error::NotHostAccessible(device))
    }
}

/// `Ok` when `dtype` is `T`'s; the mismatch otherwise (every typed view asks this first).
#[inline]
pub(in crate::safe) fn dtype_is<T: Element>(dtype: DLDataType) -> Result<(), Error> {
    if dtype == T::DTYPE {
        Ok(())
    } else {
        Err(Error::DtypeMismatch {
            expected: T::DTYPE,
            found: dtype,
        })
    }
}

/// `first` as the first element of a non-empty tensor of `T`: non-NULL and aligned for `T`.
#[inline]
pub(in crate::safe) fn first_of<T: Element>(first: *mut c_void) -> Result<*mut T, Error> {
    let ptr = first.cast::<T>();
    if ptr.is_null() {
        return Err(Error::NullData);
    }
    if !ptr.is_aligned() {
        return Err(Error::Misaligned {
            align: core::mem::align_of::<T>(),
            address: ptr as usize,
        });
    }
    Ok(ptr)
}
