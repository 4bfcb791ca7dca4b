//! `safe::SharedMut`, the shared-mutable model: Rust reads and writes go through registry
//! guards, exports are writable and hold no borrow, and a guard never aliases a view this crate
//! hands out elsewhere (an import of an export, in particular).

use std::sync::Arc;
use std::thread;

use dlpack_rs::ffi::DLPACK_FLAG_BITMASK_READ_ONLY;
use dlpack_rs::safe::{Error, Export, SharedMut};
use dlpack_rs::IntoDLPack;

const WRITE_REFUSED: Error = Error::AlreadyBorrowed { exclusive: true };
const READ_REFUSED: Error = Error::AlreadyBorrowed { exclusive: false };

#[test]
fn reads_share_and_a_write_excludes_every_other_guard() {
    let data = SharedMut::from_slice(&[1i32, 2, 3]).unwrap();
    let other = data.clone();
    assert!(data.ptr_eq(&other));
    let (a, b) = (data.read().unwrap(), other.read().unwrap());
    assert_eq!((*a == [1, 2, 3], *b == [1, 2, 3]), (true, true));
    assert_eq!(data.write().unwrap_err(), WRITE_REFUSED);
    assert_eq!(other.write().unwrap_err(), WRITE_REFUSED);
    drop((a, b));
    let mut w = other.write().unwrap();
    w[1] = 20;
    assert_eq!(data.read().unwrap_err(), READ_REFUSED);
    assert_eq!(data.write().unwrap_err(), WRITE_REFUSED);
    drop(w);
    // The edit is in the one memory every clone shares.
    assert_eq!(data.to_vec().unwrap(), [1, 20, 3]);
}

#[test]
fn constructors_and_alignment() {
    let z = SharedMut::<f64>::zeroed(5).unwrap();
    assert_eq!((z.len(), z.is_empty()), (5, false));
    assert_eq!(*z.read().unwrap(), [0.0; 5]);
    let e = SharedMut::from_elem(7u16, 3).unwrap();
    assert_eq!(e.to_vec().unwrap(), [7, 7, 7]);
    // 64-byte aligned, so jax imports it without a copy.
    let addr = e.read().unwrap().as_ptr() as usize;
    assert_eq!(addr % 64, 0);
    assert!(!e.ptr_eq(&SharedMut::from_elem(7u16, 3).unwrap()));
}

#[test]
fn empty_buffers_hand_out_any_guards() {
    let empty = SharedMut::<f32>::zeroed(0).unwrap();
    assert!(empty.is_empty());
    // No bytes: nothing to alias.
    let (w1, w2) = (empty.write().unwrap(), empty.write().unwrap());
    assert_eq!((w1.len(), w2.len()), (0, 0));
}

#[test]
fn an_export_is_writable_holds_no_borrow_and_sees_in_place_edits() {
    let data = SharedMut::from_slice(&[1.0f32, 2.0, 3.0]).unwrap();
    let exported = data.clone().into_managed_tensor_versioned().unwrap();
    assert_eq!(exported.flags() & DLPACK_FLAG_BITMASK_READ_ONLY, 0);
    // No borrow held by the export: Rust edits in place while a consumer holds it.
    data.write().unwrap()[0] = 10.0;
    assert_eq!(*exported.as_slice::<f32>().unwrap(), [10.0, 2.0, 3.0]);
    // The export's data pointer is the shared memory itself (zero-copy).
    assert_eq!(
        exported.as_slice::<f32>().unwrap().as_ptr(),
        data.read().unwrap().as_ptr()
    );
    // The safe `Export` route and the legacy struct are writable and zero-copy as well.
    let legacy = Export::new(data.clone()).legacy().unwrap();
    data.write().unwrap()[2] = 30.0;
    assert_eq!(*legacy.as_slice::<f32>().unwrap(), [10.0, 2.0, 30.0]);
}

#[test]
fn a_mutable_view_of_an_import_of_the_export_refuses_guards_and_vice_versa() {
    let data = SharedMut::from_slice(&[1u8, 2, 3, 4]).unwrap();
    let mut imported = data.clone().into_managed_tensor_versioned().unwrap();
    {
        let mut view = imported.as_mut_slice::<u8>().unwrap();
        view[0] = 9;
        assert_eq!(data.write().unwrap_err(), WRITE_REFUSED);
        assert_eq!(data.read().unwrap_err(), READ_REFUSED);
    }
    {
        let shared_view = imported.as_slice::<u8>().unwrap();
        assert_eq!(data.write().unwrap_err(), WRITE_REFUSED);
        assert_eq!(*data.read().unwrap(), [9, 2, 3, 4]);
        assert_eq!(*shared_view, [9, 2, 3, 4]);
    }
    {
        let _w = data.write().unwrap();
        assert_eq!(imported.as_mut_slice::<u8>().unwrap_err(), WRITE_REFUSED);
        assert_eq!(imported.as_slice::<u8>().unwrap_err(), READ_REFUSED);
        // A copy of the export reads the memory too: refused while Rust writes.
        assert_eq!(imported.copy().unwrap_err(), READ_REFUSED);
    }
    {
        let _r = data.read().unwrap();
        assert_eq!(imported.as_mut_slice::<u8>().unwrap_err(), WRITE_REFUSED);
        assert!(imported.as_slice::<u8>().is_ok());
    }
    assert!(imported.as_mut_slice::<u8>().is_ok());
}

#[test]
fn the_memory_outlives_every_handle_but_the_export() {
    let data = SharedMut::from_slice(&[5i64, 6]).unwrap();
    let exported = data.clone().into_managed_tensor_versioned().unwrap();
    drop(data);
    assert_eq!(*exported.as_slice::<i64>().unwrap(), [5, 6]);
}

#[test]
fn bool_exports_are_read_only_and_hold_a_borrow() {
    let flags = SharedMut::from_slice(&[true, false]).unwrap();
    let exported = flags.clone().into_managed_tensor_versioned().unwrap();
    assert_ne!(exported.flags() & DLPACK_FLAG_BITMASK_READ_ONLY, 0);
    // A consumer must not write a byte a guard would read as `bool`; Rust reads still work.
    assert_eq!(*flags.read().unwrap(), [true, false]);
    assert_eq!(flags.write().unwrap_err(), WRITE_REFUSED);
    assert!(flags.clone().into_managed_tensor().is_err()); // no legacy read-only export
    drop(exported);
    flags.write().unwrap()[1] = true;
    assert_eq!(flags.to_vec().unwrap(), [true, true]);
}

#[test]
fn an_arc_of_it_exports_read_only_and_blocks_writes() {
    let data = Arc::new(SharedMut::from_slice(&[1u32, 2]).unwrap());
    let exported = Export::new(Arc::clone(&data)).versioned().unwrap();
    assert_ne!(exported.flags() & DLPACK_FLAG_BITMASK_READ_ONLY, 0);
    assert_eq!(data.write().unwrap_err(), WRITE_REFUSED);
    drop(exported);
    assert!(data.write().is_ok());
}

#[test]
fn threads_never_hold_two_write_guards_at_once() {
    let data = SharedMut::<u64>::zeroed(4).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let data = data.clone();
            thread::spawn(move || {
                let mut done = 0u64;
                while done < 500 {
                    if let Ok(mut w) = data.write() {
                        // A non-atomic read-modify-write: lost updates would show a race.
                        let v = w[0];
                        std::hint::black_box(&mut *w);
                        w[0] = v + 1;
                        done += 1;
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(data.read().unwrap()[0], 2000);
}

#[test]
fn debug_names_the_length_without_reading_elements() {
    let data = SharedMut::from_slice(&[1u8]).unwrap();
    let _w = data.write().unwrap();
    assert!(format!("{data:?}").starts_with("SharedMut { len: 1"));
}

#[test]
fn guards_of_two_buffers_never_conflict() {
    // Each buffer's guards borrow exactly its own bytes: writers of two buffers proceed at once.
    let a = SharedMut::from_slice(&[1u32, 2, 3]).unwrap();
    let b = SharedMut::from_slice(&[4u32, 5, 6]).unwrap();
    let (mut wa, mut wb) = (a.write().unwrap(), b.write().unwrap());
    wa[0] = 10;
    wb[0] = 40;
    drop((wa, wb));
    assert_eq!(
        (a.to_vec().unwrap(), b.to_vec().unwrap()),
        (vec![10, 2, 3], vec![40, 5, 6])
    );
}

#[test]
fn as_a_buffer_of_the_safe_export_bool_data_is_read_only() {
    // `Buffer::is_writable`: consumers may write any bit pattern of numbers, never of `bool`.
    let flags = Export::new(SharedMut::from_slice(&[true, false]).unwrap())
        .versioned()
        .unwrap();
    assert_ne!(flags.flags() & DLPACK_FLAG_BITMASK_READ_ONLY, 0);
    let numbers = Export::new(SharedMut::from_slice(&[1u8, 0]).unwrap())
        .versioned()
        .unwrap();
    assert_eq!(numbers.flags() & DLPACK_FLAG_BITMASK_READ_ONLY, 0);
}
