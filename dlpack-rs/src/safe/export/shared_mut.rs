//! [`SharedMut`]: host memory Rust edits in place, through registry guards, while views live.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use crate::safe::borrow::BorrowToken;
use crate::safe::{
    AlignedBuffer, AnyBitPattern, Buffer, Element, Error, ReadGuard, SharedBuffer, WriteGuard,
};

/// Shared, 64-byte aligned host memory that Rust edits in place while consumers view it, zero-copy.
///
/// Clones share the memory; [`SharedMut::read`] and [`SharedMut::write`] take
/// [registry borrows](crate::safe#the-borrow-registry), and views taken before an edit see it.
/// Exports hold no borrow (foreign writes racing a guard are the consumer's data race), except
/// `SharedMut<bool>`'s, which are read-only and block `write`.
///
/// ```
/// use dlpack_rs::safe::{Error, SharedMut};
///
/// let pixels = SharedMut::from_slice(&[1u8, 2, 3])?;
/// let view = pixels.clone(); // the same memory
/// pixels.write()?.iter_mut().for_each(|p| *p = 255 - *p);
/// let reading = view.read()?;
/// assert_eq!(*reading, [254, 253, 252]);
/// assert_eq!(pixels.write().unwrap_err(), Error::AlreadyBorrowed { exclusive: true });
/// # Ok::<(), Error>(())
/// ```
pub struct SharedMut<T: Element> {
    inner: Arc<AlignedBuffer<T>>,
}

impl<T: Element> Clone for SharedMut<T> {
    /// Another handle of the same memory.
    fn clone(&self) -> Self {
        SharedMut {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T: Element> SharedMut<T> {
    /// `len` zeroed elements, or [`Error::OutOfMemory`] / [`Error::Overflow`].
    pub fn zeroed(len: usize) -> Result<Self, Error>
    where
        T: AnyBitPattern,
    {
        Ok(Self::from_aligned(AlignedBuffer::zeroed(len)?))
    }

    /// `len` copies of `value`.
    pub fn from_elem(value: T, len: usize) -> Result<Self, Error> {
        Ok(Self::from_aligned(AlignedBuffer::from_elem(value, len)?))
    }

    /// A copy of `values`.
    pub fn from_slice(values: &[T]) -> Result<Self, Error> {
        Ok(Self::from_aligned(AlignedBuffer::from_slice(values)?))
    }

    /// Takes over an aligned buffer (no copy).
    pub fn from_aligned(buffer: AlignedBuffer<T>) -> Self {
        SharedMut {
            inner: Arc::new(buffer),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        // Not `self.inner.len()`: that would make a `&[T]` of the elements outside a guard.
        Buffer::num_elements(&*self.inner)
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `self` and `other` are handles of the same memory.
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The byte range of the elements, as the registry keys it.
    fn byte_range(&self) -> (usize, usize) {
        let start = self.inner.as_ptr() as usize;
        // Cannot overflow: the allocation holds `len * size_of::<T>()` bytes from `start`.
        (start, start + self.len() * core::mem::size_of::<T>())
    }

    /// A shared view of the elements; [`Error::AlreadyBorrowed`] while a mutable view lives.
    pub fn read(&self) -> Result<ReadGuard<'_, &[T]>, Error> {
        let (start, end) = self.byte_range();
        let token = BorrowToken::acquire(start, end, false)?;
        // SAFETY: `len` initialised `T`s (or dangling, aligned), alive while `self` is. Every Rust
        // access is under a registry borrow, so the guard's shared one excludes writers.
        let slice = unsafe { core::slice::from_raw_parts(self.inner.as_ptr(), self.len()) };
        Ok(ReadGuard::new(slice, token))
    }

    /// A mutable view of the elements; [`Error::AlreadyBorrowed`] while any other view lives.
    /// Takes `&self`, as `RefCell::borrow_mut` does: the registry is the exclusion.
    #[allow(clippy::mut_from_ref)] // the exclusive registry borrow makes it unique
    pub fn write(&self) -> Result<WriteGuard<'_, &mut [T]>, Error> {
        let (start, end) = self.byte_range();
        let token = BorrowToken::acquire(start, end, true)?;
        // SAFETY: as in `read`, behind the allocator's pointer (write permission); every Rust
        // access holds a registry borrow, so the exclusive one just taken excludes them all.
        let slice =
            unsafe { core::slice::from_raw_parts_mut(self.inner.as_ptr().cast_mut(), self.len()) };
        Ok(WriteGuard::new(slice, token))
    }

    /// The elements, copied into a `Vec`.
    pub fn to_vec(&self) -> Result<Vec<T>, Error> {
        Ok(self.read()?.to_vec())
    }
}

impl<T: Element> fmt::Debug for SharedMut<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedMut")
            .field("len", &self.len())
            .field("ptr", &self.inner.as_ptr())
            .finish()
    }
}

// SAFETY: the `Arc`'d allocation never moves and lives until the last handle drops;
// `data_ptr` makes no reference, so it may write through `&self`. `write` takes an exclusive
// registry borrow and `read` a shared one: `REGISTRY_GUARDED`. `bool` is not writable.
unsafe impl<T: Element> Buffer for SharedMut<T> {
    type Elem = T;
    const SHARED_PTR_WRITABLE: bool = true;
    const REGISTRY_GUARDED: bool = true;
    fn data_ptr(&self) -> *mut T {
        self.inner.as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.len()
    }
    fn is_writable(&self) -> bool {
        T::ANY_BIT_PATTERN
    }
}

// SAFETY: every clone points at one allocation; owners write only under an exclusive borrow.
unsafe impl<T: Element> SharedBuffer for SharedMut<T> {}
