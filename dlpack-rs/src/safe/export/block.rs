//! One export's heap block (managed struct, shape, strides, keepalive) and its deleter.

use alloc::alloc::{alloc, dealloc, handle_alloc_error};
use alloc::boxed::Box;
use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, Ordering};

use crate::ffi::{
    DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_READ_ONLY,
};
use crate::safe::borrow::BorrowToken;
use crate::safe::{Error, Kind, Validated};

/// The head of an export's block, managed struct first; `2 * ndim` `i64`s (shape, then strides)
/// follow. `ndim` is kept here so the deleter's layout depends on nothing a consumer can touch.
#[repr(C)]
struct Header<M, K> {
    managed: M,
    ndim: usize,
    borrow: BorrowToken,
    keepalive: K,
}

/// Who besides consumers may read an export's memory: whether the export holds a shared
/// registry borrow until its deleter runs (every `READ_ONLY` one does: others share the buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Readers {
    /// The keepalive owns the memory alone: borrow only if read-only.
    ExportOnly,
    /// Rust code outside the export may read the memory while it lives: always borrow.
    Rust,
}

/// Layout of an export block with `ndim` dimensions, and the offset of its shape array.
fn block_layout<M, K>(ndim: usize) -> (Layout, usize) {
    // `ndim <= MAX_NDIM`, so this cannot fail; the fallback keeps the deleter panic-free.
    Layout::array::<i64>(2 * ndim)
        .and_then(|dims| Layout::new::<Header<M, K>>().extend(dims))
        .unwrap_or((Layout::new::<Header<M, K>>(), 0))
}

/// Where an export deleter drops a keepalive, as the installed [`KeepaliveDropper`] decides.
#[allow(dead_code)] // made by the Python glue, above safe/
pub(crate) enum DropAt {
    /// In place, now.
    Here,
    /// Through [`KeepaliveDropper::elsewhere`].
    Elsewhere,
    /// Nowhere: leaked (the interpreter is shutting down).
    Never,
}

/// How export deleters drop a keepalive that may run user code, installed by the layer that
/// hands exports to an interpreter (the Python glue: SAFETY.md, "When deleters run").
pub(crate) struct KeepaliveDropper {
    /// Where this thread may drop a keepalive now.
    pub(crate) decide: fn() -> DropAt,
    /// Runs a drop where no Python code runs without the GIL (another thread, or attached).
    pub(crate) elsewhere: fn(Box<dyn FnOnce() + Send>),
}

/// The installed [`KeepaliveDropper`]; NULL: keepalives drop in place.
static KEEPALIVE_DROPPER: AtomicPtr<KeepaliveDropper> = AtomicPtr::new(core::ptr::null_mut());

/// Makes every export deleter from now on drop its keepalive as `dropper` says.
#[allow(dead_code)] // called by the Python glue, above safe/
pub(crate) fn set_keepalive_dropper(dropper: &'static KeepaliveDropper) {
    let dropper = core::ptr::from_ref(dropper).cast_mut();
    KEEPALIVE_DROPPER.store(dropper, Ordering::Release);
}

/// Drops a keepalive as the installed [`KeepaliveDropper`] says, or in place without one.
fn drop_contained<T: Send + 'static>(value: T) {
    let dropper = KEEPALIVE_DROPPER.load(Ordering::Acquire);
    // SAFETY: only `set_keepalive_dropper` stores here, a `&'static KeepaliveDropper`.
    let Some(dropper) = (unsafe { dropper.as_ref() }) else {
        return drop_caught(value);
    };
    match (dropper.decide)() {
        DropAt::Here => drop_caught(value),
        DropAt::Elsewhere => (dropper.elsewhere)(Box::new(move || drop_caught(value))),
        DropAt::Never => core::mem::forget(value),
    }
}

/// Drops a keepalive; under `std` a panic is caught and reported, never unwinding into C.
fn drop_caught<T>(value: T) {
    #[cfg(feature = "std")]
    {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(value)));
        if let Err(payload) = result {
            // Dropping the payload runs user code too: leak whatever it throws.
            let drop_payload = std::panic::AssertUnwindSafe(move || drop(payload));
            if let Err(again) = std::panic::catch_unwind(drop_payload) {
                core::mem::forget(again);
            }
            // Not `eprintln!`, which panics when stderr is closed.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"dlpack-rs: a keepalive panicked while being dropped by a DLPack deleter\n",
            );
        }
    }
    #[cfg(not(feature = "std"))]
    drop(value);
}

/// The deleter of every export: frees the block, then drops the keepalive (`PLAIN`: in place,
/// for keepalives whose drop never calls into Python; otherwise through the installed dropper).
unsafe extern "C" fn delete_block<M, K: Send + 'static, const PLAIN: bool>(ptr: *mut M) {
    if ptr.is_null() {
        return;
    }
    let header = ptr.cast::<Header<M, K>>();
    // SAFETY: `ptr` came from `build_validated::<M, K>` (a block of `block_layout(ndim)`
    // starting with this header); DLPack calls the deleter once, so the keepalive moves out once.
    let (layout, keepalive) = unsafe {
        let (layout, _) = block_layout::<M, K>((*header).ndim);
        (layout, core::ptr::read(&raw const (*header).keepalive))
    };
    // SAFETY: as above, the borrow is moved out exactly once.
    let borrow = unsafe { core::ptr::read(&raw const (*header).borrow) };
    // SAFETY: allocated with this layout; nothing left in it needs a drop.
    unsafe { dealloc(header.cast(), layout) };
    // The bytes stop being borrowed before the keepalive may free them.
    drop(borrow);
    if PLAIN {
        drop_caught(keepalive);
    } else {
        drop_contained(keepalive);
    }
}

/// The managed struct an export is packed as; its owner is [`Managed<Self>`](crate::safe::Managed).
pub(crate) trait PackAs: Kind + Sized {
    /// Whether the struct has flags (`READ_ONLY`): only the versioned one does.
    const HAS_FLAGS: bool;
    fn new(
        tensor: DLTensor,
        flags: u64,
        ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self;
}

impl PackAs for DLManagedTensor {
    const HAS_FLAGS: bool = false;
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
}

impl PackAs for DLManagedTensorVersioned {
    const HAS_FLAGS: bool = true;
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
}

/// The funnel of every export: moves validated metadata and `keepalive` into one heap block
/// (strides always written) and takes the [`Readers`] borrow, dropping `keepalive` on error.
/// `data_from_keepalive` retakes the data pointer from the keepalive in its final place.
pub(crate) fn build_validated<M: PackAs, K: Send + 'static>(
    keepalive: K,
    validated: Validated,
    flags: u64,
    readers: Readers,
    data_from_keepalive: Option<fn(&mut K) -> *mut c_void>,
    plain_drop: bool,
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
    let deleter = if plain_drop {
        delete_block::<M, K, true>
    } else {
        delete_block::<M, K, false>
    };
    // SAFETY: a fresh allocation of `layout`: the header at 0, `2 * ndim` aligned i64s at
    // `dims_offset`. Every slot is written before use, and nothing else refers to the block.
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
        // The keepalive first, in its final place, where `data_from_keepalive` reads the pointer.
        (&raw mut (*header).keepalive).write(keepalive);
        let data = match data_from_keepalive {
            Some(data_of) => data_of(&mut (*header).keepalive),
            None => info.data,
        };
        let tensor = DLTensor {
            data,
            device: info.device,
            ndim: ndim as i32,
            dtype: info.dtype,
            shape,
            strides,
            byte_offset: info.byte_offset,
        };
        let managed = M::new(tensor, flags, block.cast(), deleter);
        (&raw mut (*header).managed).write(managed);
        (&raw mut (*header).ndim).write(ndim);
        (&raw mut (*header).borrow).write(borrow);
    }
    // SAFETY: `block` is non-NULL (checked above) and starts with the managed struct.
    Ok(unsafe { NonNull::new_unchecked(block.cast::<M>()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicUsize;

    static SENT_ELSEWHERE: AtomicUsize = AtomicUsize::new(0);
    static DROPPED: AtomicUsize = AtomicUsize::new(0);

    /// A keepalive no other test uses, counting its drops.
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn always_elsewhere() -> DropAt {
        DropAt::Elsewhere
    }

    /// Runs the drop at once, counted (other tests' keepalives come here too, unharmed).
    fn run_counted(drop: Box<dyn FnOnce() + Send>) {
        SENT_ELSEWHERE.fetch_add(1, Ordering::SeqCst);
        drop();
    }

    static DROPPER: KeepaliveDropper = KeepaliveDropper {
        decide: always_elsewhere,
        elsewhere: run_counted,
    };

    #[test]
    fn an_installed_dropper_decides_where_a_deleter_drops_its_keepalive() {
        set_keepalive_dropper(&DROPPER);
        let before = SENT_ELSEWHERE.load(Ordering::SeqCst);
        let mut data = [0f32; 2];
        let info = crate::safe::TensorInfo {
            data: data.as_mut_ptr().cast(),
            device: crate::safe::cpu_device(),
            dtype: crate::safe::dtype_f32(),
            shape: alloc::vec![2],
            strides: None,
            byte_offset: 0,
        };
        let ptr = crate::safe::pack(Counted, info);
        assert_eq!(DROPPED.load(Ordering::SeqCst), 0);
        // SAFETY: the managed struct `pack` made, deleted once.
        unsafe { ((*ptr).deleter.unwrap())(ptr) };
        assert_eq!(DROPPED.load(Ordering::SeqCst), 1);
        assert!(SENT_ELSEWHERE.load(Ordering::SeqCst) > before);
    }
}
