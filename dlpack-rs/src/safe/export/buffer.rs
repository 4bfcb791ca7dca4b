//! The memory the safe export route accepts ([`Buffer`]).

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::safe::{Element, Error};

/// Owned memory of [`Element`]s that can back an exported tensor (`Vec<T>`, `Arc<[T]>`, ...).
///
/// # Safety
/// - `data_ptr` points at `num_elements` initialised elements on `device` (non-NULL, maybe
///   dangling, when there are none), valid and in place while the value lives, even when moved.
/// - If `is_writable` is true, the pointer `data_ptr_mut` returns carries write permission.
/// - `SHARED_PTR_WRITABLE` is true only if `data_ptr`'s pointer also carries write permission
///   (read from an owned raw pointer, never from a reference to the elements).
/// - No `&self` method writes the elements, unless `REGISTRY_GUARDED` is true.
/// - `REGISTRY_GUARDED` is true only if Rust code reaches the elements (outside exports) only
///   under a registered [borrow](crate::safe#the-borrow-registry) of the bytes it touches,
///   shared to read and exclusive to write, as [`SharedMut`](crate::safe::SharedMut) does.
/// - `data_ptr`, `num_elements` and `device` answer the same on every call until the value is
///   mutably borrowed, and `data_ptr_mut` returns `data_ptr`'s address.
/// - Dropping the value never calls pyo3's `attach` nor drops a `Py`: an export's deleter drops
///   it in place, maybe where pyo3 counts the thread attached while foreign code has released
///   the GIL. Hold a Python object as a `PyKeepalive`, whose drop reads the real thread state.
pub unsafe trait Buffer {
    /// The element type; it decides the exported dtype.
    type Elem: Element;
    /// Whether consumers may write through [`Buffer::data_ptr`]'s pointer (see `# Safety`).
    const SHARED_PTR_WRITABLE: bool = false;
    /// Whether Rust reaches the elements only under registry guards; exports then take no borrow.
    const REGISTRY_GUARDED: bool = false;
    /// Pointer to the first element, for reading.
    fn data_ptr(&self) -> *mut Self::Elem;
    /// Pointer to the first element, for writing; by default [`Buffer::data_ptr`].
    fn data_ptr_mut(&mut self) -> *mut Self::Elem {
        self.data_ptr()
    }
    /// How many elements [`Buffer::data_ptr`] points at: an export's layout stays within them.
    fn num_elements(&self) -> usize;
    /// Whether consumers may write to the elements (false exports with `READ_ONLY`).
    fn is_writable(&self) -> bool {
        true
    }
    /// Where the elements live (the CPU by default).
    fn device(&self) -> crate::ffi::DLDevice {
        crate::safe::cpu_device()
    }
    /// For device memory with streams: what orders a consumer's stream after pending work.
    fn stream_order(&self) -> Option<Arc<dyn StreamOrder>> {
        None
    }
}

/// Makes a consumer's stream wait for device work pending on exported memory
/// (`__dlpack__(stream=...)`); safe, as mistakes race on device memory only.
pub trait StreamOrder: Send + Sync {
    /// Makes later work on `consumer_stream` (a DLPack stream value for `device`, never -1)
    /// wait for the work pending on the memory; an error raises `BufferError`.
    fn order_before(&self, device: crate::ffi::DLDevice, consumer_stream: i64)
        -> Result<(), Error>;
}

macro_rules! std_buffer {
    ($($ty:ty, shared_ptr_writable: $shared:expr, writable: $writable:expr, $mut_ptr:ident;)*) => {$(
        // SAFETY: the elements live in an allocation (or `'static` memory) moves never move.
        // Only `Vec::as_ptr` makes no reference (`SHARED_PTR_WRITABLE`); `Arc` and `&'static`
        // slices are not writable, so their exports are `READ_ONLY`.
        unsafe impl<T: Element> Buffer for $ty {
            type Elem = T;
            const SHARED_PTR_WRITABLE: bool = $shared;
            fn data_ptr(&self) -> *mut T {
                self.as_ptr().cast_mut()
            }
            fn data_ptr_mut(&mut self) -> *mut T {
                std_buffer!(@mut $mut_ptr self)
            }
            fn num_elements(&self) -> usize {
                self.len()
            }
            fn is_writable(&self) -> bool {
                $writable
            }
        }
    )*};
    (@mut as_mut_ptr $s:ident) => { $s.as_mut_ptr() };
    (@mut data_ptr $s:ident) => { $s.data_ptr() };
}

std_buffer! {
    Vec<T>, shared_ptr_writable: true, writable: true, as_mut_ptr;
    Box<[T]>, shared_ptr_writable: false, writable: true, as_mut_ptr;
    Arc<[T]>, shared_ptr_writable: false, writable: false, data_ptr;
    &'static [T], shared_ptr_writable: false, writable: false, data_ptr;
}

// SAFETY: the `Arc` keeps `B` in place while any clone lives and hands out only `&B`; not
// writable, so exports are `READ_ONLY` and hold a shared borrow (`block::Readers`).
unsafe impl<B: Buffer> Buffer for Arc<B> {
    type Elem = B::Elem;
    const REGISTRY_GUARDED: bool = B::REGISTRY_GUARDED;
    fn data_ptr(&self) -> *mut B::Elem {
        (**self).data_ptr()
    }
    fn num_elements(&self) -> usize {
        (**self).num_elements()
    }
    fn is_writable(&self) -> bool {
        false
    }
    fn device(&self) -> crate::ffi::DLDevice {
        (**self).device()
    }
    fn stream_order(&self) -> Option<Arc<dyn StreamOrder>> {
        (**self).stream_order()
    }
}

/// A [`Buffer`] whose clones share one memory: what a mutable `#[pyclass]` exports without a copy.
///
/// The export holds its own clone, so a `&mut self` method cannot free memory a consumer reads.
///
/// # Safety
/// Every clone describes the same memory and keeps it valid and in place while it lives. No
/// owner writes the elements while several owners exist, unless the buffer is `REGISTRY_GUARDED`.
#[diagnostic::on_unimplemented(
    message = "a mutable `#[pyclass]` cannot export `{Self}` without a copy",
    label = "not shared ownership: a `&mut self` method could free or reallocate it while a consumer reads it",
    note = "make the class `#[pyclass(frozen)]`, or hold the data by shared ownership: `Arc<[T]>` (or `Arc<AlignedBuffer<T>>`, `ndarray::ArcArray`)"
)]
pub unsafe trait SharedBuffer: Buffer + Clone + Send + Sync + 'static {}

// SAFETY: every clone points at one allocation, never written, alive until the last drops.
unsafe impl<T: Element> SharedBuffer for Arc<[T]> {}

// SAFETY: every clone points at one `B`, never moved, reached only through `&B`.
unsafe impl<B: Buffer + Send + Sync + 'static> SharedBuffer for Arc<B> {}

/// Extents or strides of any integer type as `i64`s ([`Error::Overflow`] if one does not fit).
pub(crate) fn to_i64s<D: Copy + TryInto<i64>>(values: &[D]) -> Result<Vec<i64>, Error> {
    values
        .iter()
        .map(|&v| v.try_into().map_err(|_| Error::Overflow))
        .collect()
}
