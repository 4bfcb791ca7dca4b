//! [`SharedMut`]: host memory that Rust edits in place while Python views of it live (the
//! shared-mutable model), every Rust access going through a registry guard.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use crate::safe::borrow::BorrowToken;
use crate::safe::{
    AlignedBuffer, AnyBitPattern, Buffer, Element, Error, ReadSlice, SharedBuffer, WriteSlice,
};

/// Shared, mutable host memory of `T`s: Rust reads it through [`SharedMut::read`] and writes it
/// in place through [`SharedMut::write`], and every export of it is **writable and zero-copy**,
/// so a numpy, torch or jax view taken before a Rust edit sees the edit (the model of
/// rust-numpy's `PyReadwriteArray`, for memory Rust owns).
///
/// Clones share the memory (an `Arc` inside); the allocation is 64-byte aligned, so jax imports
/// it without a copy. It is a [`SharedBuffer`]: the `#[dlpack(data)]` field of a mutable derived
/// `#[pyclass]`, or the keepalive a hand-written `__dlpack__` passes to
/// `pyo3_glue::export_dlpack_value`.
///
/// **How it stays sound.** Rust never reaches the elements except through the guards, and each
/// guard registers its bytes in the [borrow registry](crate::safe#the-borrow-registry): `read` a shared borrow,
/// `write` an exclusive one, refused with [`Error::AlreadyBorrowed`] (Python: `BufferError`)
/// while a conflicting view lives, whoever holds it: another guard of any clone, or a view of
/// an import of an export (`as_slice`, `as_mut_slice`, `TensorView`, `TensorViewMut`, in any module of
/// the process). Exports hold no borrow of their own (unlike the copy-on-write
/// [`SharedBuffer`]s, whose exports are read-only and block mutable views for as long as they
/// live), so a Rust edit is refused only while another Rust view is live. Consumers write the
/// exported memory as they write any writable export: foreign writes, outside what a registry
/// can see (a foreign write racing a Rust guard on another thread is the consumer's data race,
/// as with rust-numpy).
///
/// `bool` is the exception: a consumer could write a byte that Rust must never read as a
/// `bool`, so `SharedMut<bool>` exports read-only, and such an export holds a shared borrow (a
/// `write` is refused while it lives).
///
/// ```
/// use dlpack_rs::safe::{Error, SharedMut};
///
/// let pixels = SharedMut::from_slice(&[1u8, 2, 3])?;
/// let view = pixels.clone(); // the same memory
/// pixels.write()?.iter_mut().for_each(|p| *p = 255 - *p);
/// assert_eq!(*view.read()?, [254, 253, 252]);
///
/// let reading = view.read()?;
/// assert_eq!(pixels.write().unwrap_err(), Error::AlreadyBorrowed { exclusive: true });
/// drop(reading);
/// assert!(pixels.write().is_ok());
/// # Ok::<(), Error>(())
/// ```
pub struct SharedMut<T: Element> {
    inner: Arc<AlignedBuffer<T>>,
}

impl<T: Element> Clone for SharedMut<T> {
    /// Another handle of the same memory (no copy).
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

    /// A copy of `values` (into 64-byte aligned storage).
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

    /// A shared view of the elements, holding a shared registry borrow of their bytes until it
    /// drops. Fails with [`Error::AlreadyBorrowed`] (`exclusive: false`) while a mutable view
    /// of any of them lives: a [`SharedMut::write`] guard of any clone, or a mutable view of an
    /// import of an export (`as_mut_slice`, `TensorViewMut`).
    pub fn read(&self) -> Result<ReadSlice<'_, T>, Error> {
        let (start, end) = self.byte_range();
        let token = BorrowToken::acquire(start, end, false)?;
        // SAFETY: the allocation holds `len` initialised `T`s (or dangles, aligned, when there
        // are none) and lives as long as `self` (the guard borrows it). Rust reaches the
        // elements only through these guards and through views of imports, each of which holds
        // a registry borrow: the shared borrow just taken excludes every writer among them.
        let slice = unsafe { ReadSlice::new(self.inner.as_ptr(), self.len(), token) };
        Ok(slice)
    }

    /// A mutable view of the elements, holding an exclusive registry borrow of their bytes
    /// until it drops: an in-place edit that every consumer holding an export sees. Fails with
    /// [`Error::AlreadyBorrowed`] (`exclusive: true`) while any other view of them lives: a
    /// guard of any clone, a view of an import of an export (`as_slice`, `TensorView`,
    /// `as_mut_slice`, `TensorViewMut`), or a read-only export (of `SharedMut<bool>`).
    ///
    /// Takes `&self`, as `RefCell::borrow_mut` does: the registry is the exclusion.
    pub fn write(&self) -> Result<WriteSlice<'_, T>, Error> {
        let (start, end) = self.byte_range();
        let token = BorrowToken::acquire(start, end, true)?;
        // Every Rust access to the elements holds a registry borrow (the guards of every clone,
        // views of imports, read-only exports): the exclusive borrow just taken excludes them all.
        // SAFETY: `len` initialised `T`s (dangling and aligned when none), alive while `self` is,
        // behind the allocator's own pointer (write permission), and no other access (above).
        let slice = unsafe { WriteSlice::new(self.inner.as_ptr().cast_mut(), self.len(), token) };
        Ok(slice)
    }

    /// The elements, copied (under a shared borrow) into a `Vec`.
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

// SAFETY: the elements live in the `Arc`'d aligned allocation, which moving a handle does not
// move and which lives until the last handle drops; `data_ptr` reads the allocator's raw pointer
// (no reference to the elements is made), so it carries write permission through `&self`. The
// one `&self` method that writes the elements (`write`) does so only under an exclusive registry
// borrow of every byte of them, and every read takes a shared one: `REGISTRY_GUARDED`. `bool`
// is not writable by consumers (a byte other than 0 or 1 would be read by a guard).
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

// SAFETY: every clone points at the one allocation (the same `data_ptr`, `num_elements` and
// device on every call), which lives until the last clone drops; owners write it only under an
// exclusive registry borrow (`REGISTRY_GUARDED`), the case the trait's contract allows.
unsafe impl<T: Element> SharedBuffer for SharedMut<T> {}
