//! `AlignedBuffer` from outside: its pointers, its copies, and that dropping it frees exactly
//! its allocation (seen through a global allocator that records frees per thread).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use dlpack_rs::safe::{AlignedBuffer, Buffer};

/// The system allocator, recording on each thread the last block it freed.
struct Recording;

thread_local! {
    static LAST_FREE: Cell<Option<(usize, usize, usize)>> = const { Cell::new(None) };
}

// SAFETY: forwards to the system allocator unchanged; the thread-local it writes needs no
// allocation (const-initialised `Cell`).
unsafe impl GlobalAlloc for Recording {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LAST_FREE.try_with(|f| f.set(Some((ptr as usize, layout.size(), layout.align()))));
        // SAFETY: forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Recording = Recording;

fn last_free() -> Option<(usize, usize, usize)> {
    LAST_FREE.with(|f| f.take())
}

#[test]
fn dropping_frees_the_one_allocation_with_its_layout() {
    let b = AlignedBuffer::<u32>::zeroed(10).unwrap();
    let p = b.as_ptr() as usize;
    last_free();
    drop(b);
    assert_eq!(last_free(), Some((p, 40, 64)));
    let b = AlignedBuffer::<u8, 128>::from_elem(7, 3).unwrap();
    let p = b.as_ptr() as usize;
    drop(b);
    assert_eq!(last_free(), Some((p, 3, 128)));
    // An empty buffer allocated nothing and frees nothing.
    let e = AlignedBuffer::<u64>::zeroed(0).unwrap();
    drop(e);
    assert_eq!(last_free(), None);
}

#[test]
fn pointers_are_the_elements() {
    let mut b = AlignedBuffer::<u16>::from_slice(&[1, 2, 3]).unwrap();
    assert_eq!(b.as_ptr(), b.as_slice().as_ptr());
    assert_eq!(b.as_ptr() as usize % 64, 0);
    assert_eq!(b.as_mut_ptr(), b.as_mut_slice().as_mut_ptr());
    assert_eq!(b.data_ptr().cast_const(), b.as_ptr());
    // SAFETY: element 1 of three, written through the buffer's own pointer.
    unsafe { b.as_mut_ptr().add(1).write(20) };
    assert_eq!(b.as_slice(), &[1, 20, 3]);
    assert_eq!(b.to_vec(), vec![1, 20, 3]);
    assert_eq!(b.num_elements(), 3);
}

#[test]
fn debug_and_equality_are_the_elements() {
    let a = AlignedBuffer::<i16>::from_slice(&[1, -2]).unwrap();
    assert_eq!(format!("{a:?}"), "[1, -2]");
    assert!(a == a.clone());
    assert!(a != AlignedBuffer::<i16>::from_slice(&[1, 2]).unwrap());
    assert!(a != AlignedBuffer::<i16>::from_slice(&[1]).unwrap());
}
