//! [`AlignedBuffer`]: owned storage aligned so that jax (64 bytes) shares it without a copy.

use alloc::alloc::{alloc, alloc_zeroed, dealloc, Layout};
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

use crate::safe::{AnyBitPattern, Buffer, Element, Error};

/// An owned, fixed-length `[T]` aligned to `ALIGN` bytes (64 by default, what jax needs). As a
/// [`Buffer`] it reaches jax without the copy a `Vec<f32>` usually gets.
///
/// ```
/// use dlpack_rs::safe::{AlignedBuffer, Export};
///
/// let mut data = AlignedBuffer::<f32>::zeroed(6)?;
/// data.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
/// assert_eq!(data.as_ptr() as usize % 64, 0);
///
/// let tensor = Export::new(data).shape(&[2, 3]).versioned()?;
/// assert_eq!(tensor.as_slice::<f32>()?[4], 5.0);
///
/// // Any power of two at least `align_of::<T>()`.
/// let page = AlignedBuffer::<u8, 4096>::try_from(&[7u8; 10][..])?;
/// assert_eq!(page.as_ptr() as usize % 4096, 0);
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
pub struct AlignedBuffer<T: Element, const ALIGN: usize = 64> {
    ptr: NonNull<T>,
    len: usize,
    _owns: PhantomData<T>,
}

// SAFETY: owns its elements uniquely (like a `Box<[T]>`), and `Element: Send + Sync`.
unsafe impl<T: Element, const ALIGN: usize> Send for AlignedBuffer<T, ALIGN> {}
// SAFETY: shared access only reads the elements (`Element: Sync`).
unsafe impl<T: Element, const ALIGN: usize> Sync for AlignedBuffer<T, ALIGN> {}

impl<T: Element, const ALIGN: usize> AlignedBuffer<T, ALIGN> {
    /// The alignment, checked at compile time: a power of two, at least `align_of::<T>()`.
    const CHECKED_ALIGN: usize = {
        assert!(
            ALIGN.is_power_of_two() && ALIGN >= core::mem::align_of::<T>(),
            "AlignedBuffer: ALIGN must be a power of two and at least the element's alignment"
        );
        ALIGN
    };

    fn layout(len: usize) -> Result<Layout, Error> {
        let size = len
            .checked_mul(core::mem::size_of::<T>())
            .ok_or(Error::Overflow)?;
        Layout::from_size_align(size, Self::CHECKED_ALIGN).map_err(|_| Error::Overflow)
    }

    /// Allocates `len` elements, zeroed when `zeroed`, otherwise uninitialised.
    fn allocate(len: usize, zeroed: bool) -> Result<Self, Error> {
        let layout = Self::layout(len)?;
        let ptr = if layout.size() == 0 {
            // Dangling, aligned: never read through.
            NonNull::new(Self::CHECKED_ALIGN as *mut T).ok_or(Error::OutOfMemory)?
        } else {
            // SAFETY: the layout has a non-zero size.
            let raw = unsafe {
                if zeroed {
                    alloc_zeroed(layout)
                } else {
                    alloc(layout)
                }
            };
            NonNull::new(raw.cast::<T>()).ok_or(Error::OutOfMemory)?
        };
        Ok(AlignedBuffer {
            ptr,
            len,
            _owns: PhantomData,
        })
    }

    /// `len` zeroed elements, or [`Error::OutOfMemory`] / [`Error::Overflow`] instead of aborting.
    pub fn zeroed(len: usize) -> Result<Self, Error>
    where
        T: AnyBitPattern,
    {
        Self::allocate(len, true)
    }

    /// `len` copies of `value`.
    pub fn from_elem(value: T, len: usize) -> Result<Self, Error> {
        let buffer = Self::allocate(len, false)?;
        for i in 0..len {
            // SAFETY: `i < len`, inside the allocation, which holds `len` elements of `T`.
            unsafe { buffer.ptr.as_ptr().add(i).write(value) };
        }
        Ok(buffer)
    }

    /// The elements as a slice.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialised owned elements (or dangles, aligned, if empty).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The elements as a mutable slice.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access unique.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The first element's address.
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    /// The first element's address, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr.as_ptr()
    }
}

impl<T: Element, const ALIGN: usize> Drop for AlignedBuffer<T, ALIGN> {
    fn drop(&mut self) {
        if let Ok(layout) = Self::layout(self.len) {
            if layout.size() != 0 {
                // SAFETY: allocated by `allocate` with this very layout; `T: Copy` has no drop.
                unsafe { dealloc(self.ptr.as_ptr().cast(), layout) };
            }
        }
    }
}

impl<T: Element, const ALIGN: usize> Deref for AlignedBuffer<T, ALIGN> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Element, const ALIGN: usize> DerefMut for AlignedBuffer<T, ALIGN> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<T: Element, const ALIGN: usize> Clone for AlignedBuffer<T, ALIGN> {
    /// A copy of the elements in a new buffer of the same alignment.
    ///
    /// # Panics
    /// If the copy cannot be allocated (as `Vec::clone` does).
    fn clone(&self) -> Self {
        Self::try_from(self.as_slice()).expect("AlignedBuffer::clone: out of memory")
    }
}

impl<T: Element + fmt::Debug, const ALIGN: usize> fmt::Debug for AlignedBuffer<T, ALIGN> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Element + PartialEq, const ALIGN: usize> PartialEq for AlignedBuffer<T, ALIGN> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Element> AlignedBuffer<T> {
    /// A 64-byte aligned copy of `values` (other alignments: `AlignedBuffer::<T, A>::try_from`).
    pub fn from_slice(values: &[T]) -> Result<Self, Error> {
        Self::try_from(values)
    }
}

impl<T: Element, const ALIGN: usize> TryFrom<&[T]> for AlignedBuffer<T, ALIGN> {
    type Error = Error;
    fn try_from(values: &[T]) -> Result<Self, Error> {
        let buffer = Self::allocate(values.len(), false)?;
        // SAFETY: the new allocation holds `values.len()` elements and cannot overlap `values`.
        unsafe {
            core::ptr::copy_nonoverlapping(values.as_ptr(), buffer.ptr.as_ptr(), values.len())
        };
        Ok(buffer)
    }
}

// SAFETY: the elements live in an owned allocation moves never move, initialised while it
// lives; `data_ptr` makes no reference (`SHARED_PTR_WRITABLE`); no `&self` method writes.
unsafe impl<T: Element, const ALIGN: usize> Buffer for AlignedBuffer<T, ALIGN> {
    type Elem = T;
    const SHARED_PTR_WRITABLE: bool = true;
    fn data_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }
    fn num_elements(&self) -> usize {
        self.len
    }
}
