//! Views of data narrower than any Rust type ([`PackedSlice`]). Exports are
//! [`Export::packed`](crate::safe::Export::packed); [`Packing`] says how values sit in bytes.

use crate::safe::borrow::guard::ReadGuard;
use crate::safe::borrow::BorrowToken;
use crate::safe::import::{Kind, Managed};
use crate::safe::{Error, Packing};

/// A shared view of a contiguous tensor's packed bytes ([`Managed::as_packed`]).
pub struct PackedSlice<'a> {
    bytes: ReadGuard<'a, &'a [u8]>,
    packing: Packing,
    numel: usize,
}

impl core::fmt::Debug for PackedSlice<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PackedSlice")
            .field("dtype", &format_args!("{}", self.packing.dtype().name()))
            .field("numel", &self.numel)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl PackedSlice<'_> {
    /// The packed bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// How the values sit in [`PackedSlice::bytes`].
    pub fn packing(&self) -> Packing {
        self.packing
    }

    /// Number of elements (the tensor's `numel`).
    pub fn numel(&self) -> usize {
        self.numel
    }

    /// Number of values: `numel * lanes`.
    pub fn value_count(&self) -> usize {
        self.numel * self.packing.lanes()
    }

    /// Value `i` (in its low bits), `None` past the last one.
    pub fn value(&self, i: usize) -> Option<u8> {
        if i >= self.value_count() {
            return None;
        }
        self.packing.value(&self.bytes, i)
    }

    /// Every value in order, each in the low bits of a byte.
    pub fn values(&self) -> impl Iterator<Item = u8> + '_ {
        (0..self.value_count()).filter_map(move |i| self.packing.value(&self.bytes, i))
    }
}

impl<K: Kind> Managed<K> {
    /// The packed bytes of a contiguous host tensor of at most 8 bits per value, borrowed as
    /// [`Managed::as_slice`] is ([`Error::NotPacked`] for wider dtypes).
    pub fn as_packed(&self) -> Result<PackedSlice<'_>, Error> {
        let packing = Packing::of(self.dtype())?;
        Ok(PackedSlice {
            bytes: self.contiguous_bytes()?,
            packing,
            numel: self.numel(),
        })
    }

    /// The bytes of a C-contiguous host tensor (any dtype), borrowed shared.
    pub(crate) fn contiguous_bytes(&self) -> Result<ReadGuard<'_, &[u8]>, Error> {
        crate::safe::import::views::host_viewable(self.device())?;
        if !self.is_contiguous() {
            return Err(Error::NotContiguous);
        }
        if self.numel() == 0 {
            return Ok(ReadGuard::new(&[], BorrowToken::EMPTY));
        }
        let ptr = self.first_element::<u8>()?;
        let token = self.borrow_addressed(false)?;
        // SAFETY: non-NULL host memory, `nbytes` bytes validated in bounds, alive while `self`
        // is, any byte a valid u8, and borrowed (shared) above until the guard drops.
        let bytes = unsafe { core::slice::from_raw_parts(ptr, self.nbytes()) };
        Ok(ReadGuard::new(bytes, token))
    }
}
