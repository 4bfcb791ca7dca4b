//! Borrow-checked views of a managed tensor's elements: their checks and registry borrows.

use core::ffi::c_void;
use core::ptr::NonNull;

use crate::ffi::{DLDataType, DLDevice};
use crate::safe::borrow::guard::{ReadGuard, WriteGuard};
use crate::safe::borrow::BorrowToken;
use crate::safe::import::{Kind, Managed};
use crate::safe::layout::is_c_contiguous;
use crate::safe::{Element, Error};

/// A second borrow checker an owner's views must satisfy (see `Managed::set_external`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct External {
    pub(crate) api: &'static ExternalApi,
    /// What it keys by (an owned reference the owner releases with `drop_ctx`).
    pub(crate) ctx: *mut c_void,
}

/// The functions of an external borrow checker. None may unwind; each may run on any thread.
#[derive(Debug)]
pub(crate) struct ExternalApi {
    /// Takes a shared (`false`) or exclusive (`true`) borrow, or returns the error to report.
    pub(crate) acquire: unsafe fn(*mut c_void, bool) -> Result<(), Error>,
    /// Releases one borrow `acquire` took with the same arguments.
    pub(crate) release: unsafe fn(*mut c_void, bool),
    /// Releases the context itself, once.
    pub(crate) drop_ctx: unsafe fn(*mut c_void),
}

/// Puts `new` in an owner's `slot`, releasing the context the slot held.
///
/// # Safety
/// The slot's context is its owner's alone to release, and no token of it outlives this call.
pub(in crate::safe) unsafe fn replace_external(slot: &mut Option<External>, new: Option<External>) {
    if let Some(old) = core::mem::replace(slot, new) {
        // SAFETY: this function's contract: released once, by its only owner.
        unsafe { (old.api.drop_ctx)(old.ctx) };
    }
}

impl<K: Kind> Managed<K> {
    /// Makes every view also borrow in `external`; the owner releases its context once.
    ///
    /// # Safety
    /// `external.ctx` stays valid for `external.api`'s functions until `drop_ctx` is called on
    /// it, and this owner is the only one to call `drop_ctx` on it.
    #[allow(dead_code)] // used by the layers above safe/
    pub(crate) unsafe fn set_external(&mut self, external: External) {
        // SAFETY: the previous context was this owner's alone (this function's contract).
        unsafe { replace_external(&mut self.external, Some(external)) }
    }

    /// The external checker this owner's views satisfy, if any.
    #[allow(dead_code)] // used by the layers above safe/
    pub(crate) fn external(&self) -> Option<External> {
        self.external
    }

    /// What the view checks read of this owner.
    #[inline(always)]
    pub(crate) fn parts(&self) -> Parts<'_> {
        let t = self.raw_tensor();
        Parts {
            first: self.data_ptr(),
            shape: self.shape(),
            strides: self.raw_strides(),
            dtype: t.dtype,
            device: t.device,
            external: self.external,
        }
    }

    /// The first element of a non-empty tensor as a `*mut T`: non-NULL and aligned for `T`.
    pub(crate) fn first_element<T: Element>(&self) -> Result<*mut T, Error> {
        first_of::<T>(self.data_ptr())
    }

    /// Borrows the bytes the tensor's elements address ([`addressed_token`]).
    pub(crate) fn borrow_addressed(&self, exclusive: bool) -> Result<BorrowToken, Error> {
        let token = addressed_token(
            self.data_ptr(),
            self.shape(),
            &self.strides(),
            self.dtype(),
            exclusive,
        )?;
        // SAFETY: the context lives until this owner drops it, and every token borrows the owner;
        // the token was just taken with `exclusive`.
        unsafe { take_external(self.external, token, exclusive) }
    }

    /// The elements as a shared slice guard: needs host memory, C-contiguous layout, `T`'s dtype,
    /// alignment, valid values, and no mutable view of the bytes ([`Error::AlreadyBorrowed`]).
    pub fn as_slice<T: Element>(&self) -> Result<ReadGuard<'_, &[T]>, Error> {
        // SAFETY: validated; memory and external context live until the owner, after its views.
        let (ptr, len, token) = unsafe { self.parts().slice::<T>(false) }?;
        // SAFETY: checked and borrowed by `Parts::slice`, alive while `self` is; the token ends
        // with the guard, which borrows `self`.
        Ok(ReadGuard::new(
            unsafe { core::slice::from_raw_parts(ptr, len) },
            token,
        ))
    }

    /// A mutable [`Managed::as_slice`], for a writable tensor whose bytes no other view holds.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<WriteGuard<'_, &mut [T]>, Error> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        // SAFETY: as in `as_slice`.
        let (ptr, len, token) = unsafe { self.parts().slice::<T>(true) }?;
        // SAFETY: checked and borrowed exclusively by `Parts::slice`; not READ_ONLY; the token
        // ends with the guard, which borrows `self` mutably.
        Ok(WriteGuard::new(
            unsafe { core::slice::from_raw_parts_mut(ptr, len) },
            token,
        ))
    }
}

/// Adds `external`'s borrow, if any, to a registry token just taken for a view; an empty view
/// (no bytes: [`BorrowToken::EMPTY`]) borrows in neither.
///
/// # Safety
/// `external.ctx` stays valid for `external.api`'s functions while the returned token lives,
/// and `token` was taken with `exclusive`.
#[inline(always)]
pub(crate) unsafe fn take_external(
    external: Option<External>,
    token: BorrowToken,
    exclusive: bool,
) -> Result<BorrowToken, Error> {
    match external {
        Some(external) if token.holds_bytes() => {
            // SAFETY: this function's contract (both calls: the hold takes the token's kind).
            Ok(unsafe { token.with_external(hold(external, exclusive)?) })
        }
        _ => Ok(token),
    }
}

/// Takes `external`'s borrow (out of line, and apart from the token: a token moved through a
/// call's `Result` is copied in pieces the processor cannot forward).
///
/// # Safety
/// As [`take_external`].
#[inline(never)]
unsafe fn hold(
    external: External,
    exclusive: bool,
) -> Result<crate::safe::borrow::ExternalHold, Error> {
    // SAFETY: a live context (this function's contract).
    unsafe { (external.api.acquire)(external.ctx, exclusive) }?;
    Ok(crate::safe::borrow::ExternalHold {
        release: external.api.release,
        ctx: external.ctx,
    })
}

/// What the view checks read of a validated tensor ([`Managed`] or `Described`).
#[derive(Clone, Copy)]
pub(crate) struct Parts<'a> {
    /// The address of the first element.
    pub(crate) first: *mut c_void,
    pub(crate) shape: &'a [i64],
    /// `None`: compact row-major.
    pub(crate) strides: Option<&'a [i64]>,
    pub(crate) dtype: DLDataType,
    pub(crate) device: DLDevice,
    pub(crate) external: Option<External>,
}

impl<'a> Parts<'a> {
    /// Checks and borrows a C-contiguous slice of `T`: its first element, length and borrow.
    ///
    /// # Safety
    /// `self` describes a tensor validated by `layout::check` whose memory stays alive and in
    /// place while the returned pointer is used, and whose external context outlives the token.
    #[inline(always)]
    pub(crate) unsafe fn slice<T: Element>(
        &self,
        exclusive: bool,
    ) -> Result<(*mut T, usize, BorrowToken), Error> {
        let shape = self.shape;
        dtype_is::<T>(self.dtype)?;
        host_viewable(self.device)?;
        if !self.strides.is_none_or(|s| is_c_contiguous(shape, s)) {
            return Err(Error::NotContiguous);
        }
        // Validated: the product does not overflow unless a zero extent makes the tensor empty.
        if shape.contains(&0) {
            return Ok((NonNull::<T>::dangling().as_ptr(), 0, BorrowToken::EMPTY));
        }
        let len: usize = shape.iter().map(|&d| d as usize).product();
        let ptr = first_of::<T>(self.first)?;
        // Borrow before reading: no exclusive view of these bytes exists from here on.
        let start = ptr as usize;
        let token = BorrowToken::acquire(
            start,
            start.wrapping_add(len * core::mem::size_of::<T>()),
            exclusive,
        )?;
        // SAFETY: the context lives while the token does (this function's contract); the token
        // was just taken with `exclusive`.
        let token = unsafe { take_external(self.external, token, exclusive) }?;
        // SAFETY: host, non-NULL, aligned, contiguous `len` elements, alive (this function's
        // contract), and borrowed above so no view writes them.
        let bytes = unsafe {
            core::slice::from_raw_parts(ptr.cast::<u8>(), len * core::mem::size_of::<T>())
        };
        if !T::is_valid_bytes(bytes) {
            return Err(Error::InvalidBool);
        }
        Ok((ptr, len, token))
    }

    /// Strides in elements, compact ones where the producer gave none.
    pub(crate) fn strides(&self) -> alloc::borrow::Cow<'a, [i64]> {
        match self.strides {
            Some(s) => alloc::borrow::Cow::Borrowed(s),
            None => alloc::borrow::Cow::Owned(crate::safe::compact_strides(self.shape)),
        }
    }
}

/// Borrows the bytes a validated tensor's elements address, as a strided span (a range for
/// sub-byte elements). `first` is never dereferenced.
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
    // Elements start at multiples of the byte strides' gcd: `z[::2]` and `z[1::2]` may coexist.
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

/// Whether safe code may view memory on `device` from the host: plain CPU memory only, since
/// queued device work may still write pinned or managed memory.
pub(crate) fn host_viewable(device: crate::ffi::DLDevice) -> Result<(), Error> {
    if device.device_type.is_host_viewable() {
        Ok(())
    } else {
        Err(Error::NotHostAccessible(device))
    }
}

/// `Ok` when `dtype` is `T`'s, else the mismatch.
#[inline]
pub(crate) fn dtype_is<T: Element>(dtype: DLDataType) -> Result<(), Error> {
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
