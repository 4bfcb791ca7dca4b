//! The memory of one export: a single heap block holding the managed struct, the shape and
//! strides, and the keepalive, and the deleter that frees exactly that block.

use alloc::alloc::{alloc, dealloc, handle_alloc_error};
use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr::NonNull;

use crate::ffi::{
    DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_READ_ONLY,
};
use crate::safe::borrow::BorrowToken;
use crate::safe::{Error, TensorInfo, Validated};

/// The head of an export's one heap block: the managed struct first (so a pointer to it is a
/// pointer to the block), the number of dimensions (to rebuild the block's layout in the
/// deleter, independent of anything a consumer might touch), the export's shared borrow of its
/// bytes (see [`Readers`]), then the keepalive. `2 * ndim` `i64`s follow it: the shape, then the
/// strides, which the managed struct points into.
#[repr(C)]
struct Header<M, K> {
    managed: M,
    ndim: usize,
    borrow: BorrowToken,
    keepalive: K,
}

/// Who, besides the consumers of an export, may read its memory while they hold it: what
/// decides, in [`build_validated`] (the one function every export of this crate passes
/// through), whether the export holds a shared borrow of its bytes in the [borrow
/// registry](crate::safe#the-borrow-registry) until its deleter runs.
///
/// An export holds that borrow when Rust code elsewhere may still read the memory: when the
/// caller says so ([`Readers::Rust`]: a frozen `#[pyclass]` reads its own field through
/// `&self`), and for every `READ_ONLY` export, whatever the caller says: a buffer is exported
/// read-only exactly because other owners share it (`Arc`, `&'static`, `ArcArray`, a mutable
/// class's shared field, an owner that is read-only itself). With the borrow held, no import of
/// the memory (directly, or after torch re-exported it writable, ignoring `READ_ONLY`) gets a
/// mutable view while those readers may read: `as_mut_slice`, `TensorViewMut`, `as_array_mut` fail
/// with [`Error::AlreadyBorrowed`]. A writable export the caller owns alone
/// ([`Readers::ExportOnly`]: a `Vec` moved in, a fresh copy) needs none: once moved into the
/// block, nothing but the consumers reaches those bytes, and their own views are borrows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Readers {
    /// Only consumers read the memory (the keepalive owns it alone): borrow only if read-only.
    ExportOnly,
    /// Rust code outside the export may read the memory while it lives: always borrow.
    Rust,
}

/// Layout of an export block with `ndim` dimensions, and the offset of its shape array.
fn block_layout<M, K>(ndim: usize) -> (Layout, usize) {
    // `ndim <= MAX_NDIM` (validated before any block is made), so neither step can overflow;
    // the fallback keeps this free of panics for the deleter's sake all the same.
    Layout::array::<i64>(2 * ndim)
        .and_then(|dims| Layout::new::<Header<M, K>>().extend(dims))
        .unwrap_or((Layout::new::<Header<M, K>>(), 0))
}

/// Drops an export's keepalive. Under `std` a panic is caught and reported so that it never
/// unwinds into the C caller of the deleter; without `std` the `extern "C"` deleter aborts.
fn drop_contained<T>(value: T) {
    #[cfg(feature = "std")]
    {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(value)));
        if let Err(payload) = result {
            // Dropping the payload is user code too: contain it, and leak whatever it throws.
            let drop_payload = std::panic::AssertUnwindSafe(move || drop(payload));
            if let Err(again) = std::panic::catch_unwind(drop_payload) {
                core::mem::forget(again);
            }
            // `eprintln!` would panic if stderr cannot be written (a closed pipe): ignore that.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"dlpack-rs: a keepalive panicked while being dropped by a DLPack deleter\n",
            );
        }
    }
    #[cfg(not(feature = "std"))]
    drop(value);
}

/// The deleter of every export: frees the block, then drops the keepalive (so a keepalive that
/// panics, caught under `std`, leaks nothing else).
unsafe extern "C" fn delete_block<M, K>(ptr: *mut M) {
    if ptr.is_null() {
        return;
    }
    let header = ptr.cast::<Header<M, K>>();
    // SAFETY: `ptr` came from `build::<M, K>`, which allocated a block of `block_layout(ndim)`
    // starting with this header; the DLPack contract lets the consumer call the deleter only
    // once, so the keepalive is moved out and the block freed exactly once.
    let (layout, keepalive) = unsafe {
        let (layout, _) = block_layout::<M, K>((*header).ndim);
        (layout, core::ptr::read(&raw const (*header).keepalive))
    };
    // SAFETY: as above, the borrow is moved out exactly once.
    let borrow = unsafe { core::ptr::read(&raw const (*header).borrow) };
    // SAFETY: the block was allocated with exactly this layout; the managed struct and the
    // dims need no drop, and the borrow and the keepalive were moved out above.
    unsafe { dealloc(header.cast(), layout) };
    // The bytes stop being borrowed before the keepalive may free them.
    drop(borrow);
    drop_contained(keepalive);
}

/// The two managed-struct kinds an export can produce.
pub(crate) trait ManagedStruct: Sized {
    fn new(
        tensor: DLTensor,
        flags: u64,
        ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self;
    fn tensor_mut(&mut self) -> &mut DLTensor;
}

impl ManagedStruct for DLManagedTensor {
    fn new(
        dl_tensor: DLTensor,
        _flags: u64,
        manager_ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self {
        DLManagedTensor {
            dl_tensor,
            manager_ctx,
            deleter: Some(deleter),
        }
    }
    fn tensor_mut(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }
}

impl ManagedStruct for DLManagedTensorVersioned {
    fn new(
        dl_tensor: DLTensor,
        flags: u64,
        manager_ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self {
        DLManagedTensorVersioned {
            version: DLPackVersion::CURRENT,
            manager_ctx,
            deleter: Some(deleter),
            flags,
            dl_tensor,
        }
    }
    fn tensor_mut(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }
}

/// Validates `info` and moves it with `keepalive` into one heap block: [`build_validated`].
pub(crate) fn build<M: ManagedStruct, K: Send + 'static>(
    keepalive: K,
    info: TensorInfo,
    flags: u64,
    readers: Readers,
    data_from_keepalive: Option<fn(&mut K) -> *mut c_void>,
) -> Result<NonNull<M>, Error> {
    let validated = Validated::new(info)?;
    build_validated(keepalive, validated, flags, readers, data_from_keepalive)
}

/// Moves validated metadata with `keepalive` into one heap block (one allocation per export).
/// Strides are always written out (DLPack >= 1.2 asks producers for non-NULL strides).
///
/// With `data_from_keepalive`, the data pointer is taken anew from the keepalive once it sits in
/// its final place in the block (through `&mut`, so a consumer's writes have the provenance of a
/// unique borrow); the metadata's pointer then only served validation.
///
/// Every export of this crate passes through here: it registers the export's shared borrow
/// (see [`Readers`]) and fails with [`Error::AlreadyBorrowed`] while a mutable view of the
/// bytes lives, or [`Error::OutOfMemory`] when the registry cannot grow (`keepalive` is
/// dropped then).
///
/// What the metadata describes is not this function's to trust: it only builds the block and
/// returns a pointer. Whoever turns that pointer into an owner whose views read the memory
/// (`pack_validated`) vouches for it.
pub(crate) fn build_validated<M: ManagedStruct, K: Send + 'static>(
    keepalive: K,
    validated: Validated,
    flags: u64,
    readers: Readers,
    data_from_keepalive: Option<fn(&mut K) -> *mut c_void>,
) -> Result<NonNull<M>, Error> {
    let borrow = if readers == Readers::Rust || flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0 {
        validated.borrow(false)?
    } else {
        BorrowToken::EMPTY
    };
    let info = validated.into_info();
    let ndim = info.shape.len(); // validated: at most MAX_NDIM
    let (layout, dims_offset) = block_layout::<M, K>(ndim);
    // SAFETY: the layout is not zero-sized (the header holds the managed struct).
    let block = unsafe { alloc(layout) };
    if block.is_null() {
        handle_alloc_error(layout);
    }
    let header = block.cast::<Header<M, K>>();
    // SAFETY: `block` is a fresh allocation of `layout`: the header at offset 0, then room for
    // `2 * ndim` i64s at `dims_offset` (aligned for i64 by `Layout::extend`). Every slot is
    // written before the pointer leaves this function; the keepalive is reached through the
    // header only after it was written, and nothing else refers to the block yet.
    unsafe {
        let shape = block.add(dims_offset).cast::<i64>();
        let strides = shape.add(ndim);
        core::ptr::copy_nonoverlapping(info.shape.as_ptr(), shape, ndim);
        match &info.strides {
            Some(given) => core::ptr::copy_nonoverlapping(given.as_ptr(), strides, ndim),
            None => {
                let mut acc: i64 = 1;
                for axis in (0..ndim).rev() {
                    strides.add(axis).write(acc);
                    // Validated: the element count does not overflow.
                    acc = acc.wrapping_mul(info.shape[axis].max(1));
                }
            }
        }
        let tensor = DLTensor {
            data: info.data,
            device: info.device,
            ndim: ndim as i32,
            dtype: info.dtype,
            shape,
            strides,
            byte_offset: info.byte_offset,
        };
        header.write(Header {
            managed: M::new(tensor, flags, block.cast(), delete_block::<M, K>),
            ndim,
            borrow,
            keepalive,
        });
        if let Some(data_of) = data_from_keepalive {
            let data = data_of(&mut (*header).keepalive);
            (*header).managed.tensor_mut().data = data;
        }
    }
    // SAFETY: `block` is non-NULL (checked above) and starts with the managed struct.
    Ok(unsafe { NonNull::new_unchecked(block.cast::<M>()) })
}
