//! Slice views that hold a registry borrow while they live.

use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

use crate::safe::borrow::BorrowToken;

/// A shared view of a tensor's elements ([`Managed::as_slice`](crate::safe::Managed::as_slice)).
///
/// While it lives, no mutable view of its bytes can be taken through any owner of the memory.
pub struct ReadSlice<'a, T> {
    ptr: *const T,
    len: usize,
    _borrow: BorrowToken,
    _life: PhantomData<&'a [T]>,
}

/// An exclusive view of a tensor's elements ([`Managed::as_mut_slice`](crate::safe::Managed::as_mut_slice)).
///
/// While it lives, no other view of its bytes can be taken through any owner of the memory.
pub struct WriteSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: BorrowToken,
    _life: PhantomData<&'a mut [T]>,
}

// SAFETY: a `ReadSlice` is a `&[T]` plus a registry token (thread-safe to release anywhere).
unsafe impl<T: Sync> Send for ReadSlice<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for ReadSlice<'_, T> {}
// SAFETY: a `WriteSlice` is a `&mut [T]` plus a registry token.
unsafe impl<T: Send> Send for WriteSlice<'_, T> {}
// SAFETY: as above; `&WriteSlice` only gives `&[T]`.
unsafe impl<T: Sync> Sync for WriteSlice<'_, T> {}

impl<'a, T> ReadSlice<'a, T> {
    /// # Safety
    /// `ptr` points at `len` initialised, valid `T`s (or dangles, aligned, for `len == 0`) that
    /// stay alive and unwritten for `'a`. `borrow` (shared, covering them) only excludes writers
    /// in the registry; foreign writers are excluded by the export rules (read-only flags).
    pub(crate) unsafe fn new(ptr: *const T, len: usize, borrow: BorrowToken) -> Self {
        ReadSlice {
            ptr,
            len,
            _borrow: borrow,
            _life: PhantomData,
        }
    }
}

impl<'a, T> WriteSlice<'a, T> {
    /// # Safety
    /// `ptr` points at `len` initialised, valid, writable `T`s (or dangles, aligned, for
    /// `len == 0`) alive for `'a`, and nothing else reads or writes them meanwhile. `borrow`
    /// (exclusive, covering them) establishes that for views and exports of this crate only.
    pub(crate) unsafe fn new(ptr: *mut T, len: usize, borrow: BorrowToken) -> Self {
        WriteSlice {
            ptr,
            len,
            _borrow: borrow,
            _life: PhantomData,
        }
    }
}

impl<T> Deref for ReadSlice<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `new`'s contract; the slice borrows the guard, so it cannot outlive the borrow.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> Deref for WriteSlice<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `new`'s contract; borrows the guard.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> DerefMut for WriteSlice<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: `new`'s contract (exclusive); borrows the guard mutably.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

macro_rules! slice_like {
    ($guard:ident) => {
        impl<T: fmt::Debug> fmt::Debug for $guard<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                (**self).fmt(f)
            }
        }
        impl<T> AsRef<[T]> for $guard<'_, T> {
            fn as_ref(&self) -> &[T] {
                self
            }
        }
        impl<T: PartialEq> PartialEq for $guard<'_, T> {
            fn eq(&self, other: &Self) -> bool {
                **self == **other
            }
        }
        impl<T: PartialEq> PartialEq<[T]> for $guard<'_, T> {
            fn eq(&self, other: &[T]) -> bool {
                **self == *other
            }
        }
        impl<T: PartialEq> PartialEq<&[T]> for $guard<'_, T> {
            fn eq(&self, other: &&[T]) -> bool {
                **self == **other
            }
        }
        impl<T: PartialEq, const N: usize> PartialEq<[T; N]> for $guard<'_, T> {
            fn eq(&self, other: &[T; N]) -> bool {
                **self == other[..]
            }
        }
        impl<T: PartialEq, const N: usize> PartialEq<&[T; N]> for $guard<'_, T> {
            fn eq(&self, other: &&[T; N]) -> bool {
                **self == other[..]
            }
        }
        impl<T: PartialEq> PartialEq<alloc::vec::Vec<T>> for $guard<'_, T> {
            fn eq(&self, other: &alloc::vec::Vec<T>) -> bool {
                **self == other[..]
            }
        }
        impl<'b, T> IntoIterator for &'b $guard<'_, T> {
            type Item = &'b T;
            type IntoIter = core::slice::Iter<'b, T>;
            fn into_iter(self) -> Self::IntoIter {
                self.iter()
            }
        }
    };
}
slice_like!(ReadSlice);
slice_like!(WriteSlice);

impl<'b, T> IntoIterator for &'b mut WriteSlice<'_, T> {
    type Item = &'b mut T;
    type IntoIter = core::slice::IterMut<'b, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}
