//! What memory the safe export route accepts: the [`Buffer`] trait (owned element storage that
//! never moves) and its implementations, and [`Dim`] for extents and strides.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::safe::{Element, Error};

/// Owned memory of [`Element`]s that can back an exported tensor: `Vec<T>`, `Box<[T]>`,
/// `Arc<[T]>` (exported read-only), `&'static [T]` (read-only), or a user container.
///
/// # Safety
///
/// - `data_ptr` must point at `num_elements` initialised elements (it may dangle, but must not
///   be NULL, when there are none), and that memory must stay valid and in place for as long as
///   the value lives, even when the value itself is moved.
/// - If `is_writable` returns true, consumers may write through the pointer `data_ptr_mut`
///   returns while they hold the export (the value is then owned by the export and reached by
///   nothing else), so that pointer must carry write permission for the elements.
/// - `device` must say where the memory is (a consumer reads it there).
/// - `SHARED_PTR_WRITABLE` may be true only if the pointer `data_ptr` returns from `&self` also
///   carries write permission (it is read from a raw pointer the value owns, never derived from
///   a reference to the elements), as for `Vec::as_ptr`.
/// - No method taking `&self` writes the elements (no interior mutability of the elements): safe
///   code that shares the value only ever reads them. The one exception is a type whose
///   `REGISTRY_GUARDED` is true (below).
/// - `REGISTRY_GUARDED` may be true only if Rust code reaches the elements (other than through
///   an export of the value) only under a registered [borrow](crate::safe#the-borrow-registry) of every byte it
///   touches, held for as long as the access: shared to read, exclusive to write, as
///   [`SharedMut`](crate::safe::SharedMut)'s guards do; `&self` methods may then write the elements
///   under the exclusive borrow. Exports of such a buffer hold no borrow unless read-only.
/// - `data_ptr`, `num_elements` and `device` give the same answers on every call, whether the
///   value was moved or shared meanwhile, until it is mutably borrowed; `data_ptr_mut` returns
///   the address `data_ptr` does. (The crate checks a layout against one answer and exports
///   another: a buffer whose answers change through `&self`, a cursor say, would let a
///   consumer read outside it.)
pub unsafe trait Buffer {
    /// The element type; it decides the exported dtype.
    type Elem: Element;
    /// Whether the pointer [`Buffer::data_ptr`] returns through `&self` may be written by a
    /// consumer (see the trait's safety section). `false` unless a type says so.
    const SHARED_PTR_WRITABLE: bool = false;
    /// Whether every access of Rust code to the elements goes through registry guards (see the
    /// trait's safety section): an export of the buffer then needs no borrow of its own to keep
    /// Rust readers from seeing a mutable view, and a writable export of it leaves Rust free to
    /// edit the memory in place. `false` unless a type says so
    /// ([`SharedMut`](crate::safe::SharedMut)).
    const REGISTRY_GUARDED: bool = false;
    /// Pointer to the first element, for reading.
    fn data_ptr(&self) -> *mut Self::Elem;
    /// Pointer to the first element, for writing; by default [`Buffer::data_ptr`] (right for
    /// read-only buffers and for those whose `SHARED_PTR_WRITABLE` is true).
    fn data_ptr_mut(&mut self) -> *mut Self::Elem {
        self.data_ptr()
    }
    /// Number of elements.
    fn num_elements(&self) -> usize;
    /// Whether consumers may write to the elements (false exports with `READ_ONLY`).
    fn is_writable(&self) -> bool {
        true
    }
    /// Where the elements live (the CPU unless a type says otherwise). The derive refuses to
    /// describe the buffer as being anywhere else.
    fn device(&self) -> crate::ffi::DLDevice {
        crate::safe::cpu_device()
    }
    /// For memory on a device with streams (CUDA, ROCm): what orders a consumer's stream after
    /// the work still pending on the memory, which `__dlpack__(stream=...)` calls before it
    /// hands the data over. `None` (the default) for memory with no pending device work.
    fn stream_order(&self) -> Option<Arc<dyn StreamOrder>> {
        None
    }
}

/// How a consumer's stream is made to wait for the device work still pending on exported
/// memory: what the DLPack rules ask of a producer when the consumer passes
/// `__dlpack__(stream=...)` (or of the producer's C exchange table, whose consumers order their
/// work after the stream `current_work_stream` names: the default stream, for this crate).
///
/// Returned by [`Buffer::stream_order`] and
/// [`IntoDLPack::stream_order`](crate::IntoDLPack::stream_order); with feature `cudarc` a
/// `CudaSlice` has one (an event recorded on its stream, waited for on the consumer's).
/// Getting it wrong is a race on device memory, never host memory the crate reads: the trait
/// is safe to implement.
pub trait StreamOrder: Send + Sync {
    /// Makes work submitted to `consumer_stream` after this call wait for the work pending on
    /// the memory. `consumer_stream` is a DLPack stream value for `device`: for CUDA 1 (the
    /// legacy default stream), 2 (the per-thread default stream) or a `cudaStream_t`; for ROCm
    /// 0 (the default stream) or a `hipStream_t`. Never -1 ("no synchronisation": not called).
    /// `__dlpack__` raises `BufferError` with the error.
    fn order_before(&self, device: crate::ffi::DLDevice, consumer_stream: i64)
        -> Result<(), Error>;
}

/// `Buffer` for the standard library's owned slices, each with what it permits.
macro_rules! std_buffer {
    ($($ty:ty, shared_ptr_writable: $shared:expr, writable: $writable:expr, $mut_ptr:ident;)*) => {$(
        // SAFETY: for every row below, the elements live in the container's own heap
        // allocation (or, for `&'static`, in memory that lives for the whole program), which
        // moving the container does not move, and stay initialised while it lives. `Vec::as_ptr`
        // reads the Vec's raw pointer without making a reference to the elements (documented by
        // `Vec`), so only `Vec` says `SHARED_PTR_WRITABLE`; a boxed slice's `as_mut_ptr` goes
        // through a unique reborrow, so its `data_ptr_mut` may be written. `Arc` and `&'static`
        // slices are shared: `is_writable` is false, so every export of them is `READ_ONLY`,
        // and every read-only export holds a shared borrow of its bytes until its deleter runs
        // (`block::Readers`): a flag alone would not do, since torch ignores it and re-exports
        // the memory writable; the borrow makes every mutable view of it through this crate
        // fail while the other owners may read.
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

// SAFETY: an `Arc` of a buffer keeps the buffer, and so its memory, in place for as long as any
// clone lives; it only hands out `&B`, through which (the `Buffer` contract) nothing writes the
// elements. Other clones may read them while an export lives: `is_writable` is false, so the
// export is `READ_ONLY` and holds a shared borrow of the bytes until its deleter runs
// (`block::Readers`), which refuses every mutable view through this crate meanwhile.
unsafe impl<B: Buffer> Buffer for Arc<B> {
    type Elem = B::Elem;
    // `&B` is all an `Arc` hands out: `B`'s own guards are the only way to its elements.
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

/// A [`Buffer`] held by shared ownership, whose clones share one memory: what a *mutable*
/// `#[pyclass]` can export without a copy. The export holds its own clone, so a `&mut self`
/// method that replaces (or drops) the class's value cannot free memory a consumer still reads.
///
/// Two models:
/// - **copy-on-write** (`Arc<[T]>`, `Arc<B>` of any `Buffer` such as `Arc<Vec<T>>` or
///   `Arc<AlignedBuffer<T>>`, and with feature `ndarray` `ArcArray`): owners never write shared
///   memory, exports are read-only and hold a shared borrow, and an edit makes new memory that
///   existing views do not see;
/// - **shared-mutable** ([`SharedMut`](crate::safe::SharedMut), `REGISTRY_GUARDED`): owners edit the
///   memory in place under registry guards, exports are writable and hold no borrow, and
///   existing views see every edit.
///
/// # Safety
///
/// A clone must describe the same memory (the same `data_ptr`, `num_elements` and `device`, on
/// every call: see `Buffer`) and keep it valid and in place for as long as it lives, whatever
/// happens to the other clones; and no owner may write the elements while more than one owner
/// exists (immutable shared data, or copy-on-write like `ArcArray`), unless the buffer is
/// `REGISTRY_GUARDED` (every owner writes only under an exclusive registry borrow).
#[diagnostic::on_unimplemented(
    message = "a mutable `#[pyclass]` cannot export `{Self}` without a copy",
    label = "not shared ownership: a `&mut self` method could free or reallocate it while a consumer reads it",
    note = "make the class `#[pyclass(frozen)]`, or hold the data by shared ownership: `Arc<[T]>` (or `Arc<AlignedBuffer<T>>`, `ndarray::ArcArray`)"
)]
pub unsafe trait SharedBuffer: Buffer + Clone + Send + Sync + 'static {}

// SAFETY: an `Arc<[T]>` never writes its elements (`T: Element` has no interior mutability)
// and every clone points at the one allocation, which lives until the last clone drops.
unsafe impl<T: Element> SharedBuffer for Arc<[T]> {}

// SAFETY: every clone points at the one `B`, which never moves and lives until the last clone
// drops; `Arc` hands out only `&B`, through which nothing writes the elements.
unsafe impl<B: Buffer + Send + Sync + 'static> SharedBuffer for Arc<B> {}

/// The read pointer of a buffer in its final place, for [`build`](crate::safe::export::block::build).
pub(crate) fn read_ptr<B: Buffer>(buffer: &mut B) -> *mut core::ffi::c_void {
    buffer.data_ptr().cast()
}

/// The write pointer of a buffer in its final place, for [`build`](crate::safe::export::block::build).
pub(crate) fn write_ptr<B: Buffer>(buffer: &mut B) -> *mut core::ffi::c_void {
    buffer.data_ptr_mut().cast()
}

/// An integer usable as a dimension extent or stride (`i64`, `i32`, `isize`, `usize`, `u32`,
/// `u64`); conversion is checked.
pub trait Dim: Copy {
    /// The value as `i64`, or `None` if it does not fit.
    fn to_i64(self) -> Option<i64>;
}

macro_rules! dims {
    ($($t:ty),*) => {$(
        impl Dim for $t {
            fn to_i64(self) -> Option<i64> {
                i64::try_from(self).ok()
            }
        }
    )*};
}
dims!(i64, i32, isize, usize, u32, u64);

pub(crate) fn to_i64s<D: Dim>(values: &[D]) -> Result<Vec<i64>, Error> {
    values
        .iter()
        .map(|v| v.to_i64().ok_or(Error::Overflow))
        .collect()
}
