//! The borrow registry seen from safe code: two owners of one memory never hand out aliasing
//! views, borrows end with their guards, and the registry holds up under threads.

use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Barrier};

use dlpack_rs::safe::{
    cpu_device, dtype_f32, pack_versioned, Error, Export, Managed, ManagedTensorVersioned,
    TensorInfo,
};

/// Two owners of one `Vec`'s memory (two exports of one buffer, as two `__dlpack__` calls on
/// one numpy array give): the keepalive is the shared `Arc`.
fn two_owners(len: usize) -> (ManagedTensorVersioned, ManagedTensorVersioned) {
    let data: Arc<Vec<f32>> = Arc::new((0..len).map(|i| i as f32).collect());
    let make = |keep: Arc<Vec<f32>>| {
        let info = TensorInfo::contiguous(
            keep.as_ptr() as *mut _,
            cpu_device(),
            dtype_f32(),
            vec![len as i64],
        );
        let raw = pack_versioned(keep, info, 0);
        // SAFETY: a fresh export owned here; its memory is the Arc'd Vec the keepalive holds.
        // (Writable views of it are for this test only: nothing else reads the Vec.)
        unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap()
    };
    (make(data.clone()), make(data))
}

#[test]
fn two_owners_never_alias_mutably() {
    let (mut a, mut b) = two_owners(4);
    {
        let mut wa = a.as_mut_slice::<f32>().unwrap();
        assert_eq!(
            b.as_mut_slice::<f32>().unwrap_err(),
            Error::AlreadyBorrowed { exclusive: true }
        );
        assert_eq!(
            b.as_slice::<f32>().unwrap_err(),
            Error::AlreadyBorrowed { exclusive: false }
        );
        wa[0] = 42.0;
    }
    // Released with the guard.
    let rb = b.as_slice::<f32>().unwrap();
    assert_eq!(rb[0], 42.0);
    // Shared views coexist across owners; an exclusive one waits for all of them.
    let ra = a.as_slice::<f32>().unwrap();
    assert_eq!(*ra, *rb);
    drop(rb);
    assert!(b.as_mut_slice::<f32>().is_err());
    drop(ra);
    assert!(b.as_mut_slice::<f32>().is_ok());
}

/// With `noalias` on `&mut`, a release build may return the value read before the write here:
/// exactly what two aliasing views would produce. The registry refuses the second view, so the
/// function is never called with aliasing arguments.
#[inline(never)]
fn write_then_read(x: &mut [f32], y: &[f32]) -> f32 {
    let before = y[0];
    x[0] = before + 1.0;
    y[0]
}

#[test]
fn a_noalias_miscompile_is_unreachable() {
    let (mut a, b) = two_owners(2);
    let mut wa = a.as_mut_slice::<f32>().unwrap();
    match b.as_slice::<f32>() {
        Ok(rb) => panic!(
            "aliasing views handed out (write_then_read would give {})",
            write_then_read(&mut wa, &rb)
        ),
        Err(e) => assert_eq!(e, Error::AlreadyBorrowed { exclusive: false }),
    }
    // Two distinct buffers: the function's answer is the value before the write.
    let mut c = Export::new(vec![1.0f32, 2.0]).versioned().unwrap();
    let d = Export::new(vec![7.0f32]).versioned().unwrap();
    assert_eq!(
        write_then_read(
            &mut c.as_mut_slice::<f32>().unwrap(),
            &d.as_slice::<f32>().unwrap()
        ),
        7.0
    );
}

#[test]
fn copy_takes_a_shared_borrow_of_the_source() {
    let (mut a, b) = two_owners(3);
    let w = a.as_mut_slice::<f32>().unwrap();
    assert_eq!(
        b.copy().unwrap_err(),
        Error::AlreadyBorrowed { exclusive: false }
    );
    drop(w);
    let c = b.copy().unwrap();
    assert!(c.is_copied());
    assert_eq!(c.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0]);
    // The copy is new memory: it may be written while the source is read.
    let mut c = c;
    let _read = b.as_slice::<f32>().unwrap();
    c.as_mut_slice::<f32>().unwrap()[0] = 9.0;
}

#[test]
fn empty_tensors_borrow_nothing() {
    let (mut a, mut b) = two_owners(0);
    let _wa = a.as_mut_slice::<f32>().unwrap();
    assert!(b.as_mut_slice::<f32>().unwrap().is_empty());
}

#[test]
fn exclusive_borrows_exclude_everyone_across_threads() {
    // Eight threads take views of overlapping windows of one buffer through their own owners;
    // `holders` counts the views alive (an exclusive one counts as -1000): an exclusive view
    // must always be alone.
    const THREADS: usize = 8;
    let data: Arc<Vec<f32>> = Arc::new(vec![0.0; 64]);
    let holders = Arc::new(AtomicIsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|k| {
            let data = data.clone();
            let holders = holders.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                // A window of 16 elements starting at 4*k: neighbours overlap.
                let info = TensorInfo::contiguous(
                    data.as_ptr().wrapping_add(4 * (k % 4)) as *mut _,
                    cpu_device(),
                    dtype_f32(),
                    vec![16],
                );
                let raw = pack_versioned(data.clone(), info, 0);
                // SAFETY: a fresh export of memory the keepalive (the Arc) holds; every view of
                // it goes through the registry under test.
                let mut t: Managed<dlpack_rs::ffi::DLManagedTensorVersioned> =
                    unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
                barrier.wait();
                let (mut exclusive, mut shared) = (0, 0);
                for i in 0..2000 {
                    if (i + k) % 3 == 0 {
                        if let Ok(mut w) = t.as_mut_slice::<f32>() {
                            assert_eq!(holders.fetch_sub(1000, Ordering::SeqCst), 0);
                            w[0] += 1.0;
                            holders.fetch_add(1000, Ordering::SeqCst);
                            exclusive += 1;
                        }
                    } else if let Ok(r) = t.as_slice::<f32>() {
                        assert!(holders.fetch_add(1, Ordering::SeqCst) >= 0);
                        let _ = r[0];
                        holders.fetch_sub(1, Ordering::SeqCst);
                        shared += 1;
                    }
                }
                (exclusive, shared)
            })
        })
        .collect();
    let mut total = (0, 0);
    for h in handles {
        let (e, s) = h.join().unwrap();
        total.0 += e;
        total.1 += s;
    }
    assert!(total.0 > 0 && total.1 > 0, "{total:?}");
    assert_eq!(holders.load(Ordering::SeqCst), 0);
}

#[test]
fn owners_and_views_have_the_documented_auto_traits() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<dlpack_rs::safe::ManagedTensor>();
    send_sync::<ManagedTensorVersioned>();
    send_sync::<dlpack_rs::safe::AnyManaged>();
    send_sync::<dlpack_rs::safe::ReadGuard<'static, &'static [f32]>>();
    send_sync::<dlpack_rs::safe::WriteGuard<'static, &'static mut [f32]>>();
    // `&owner` shared across threads: concurrent shared views.
    let t = Export::new(vec![1u8, 2, 3]).versioned().unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 2, 3]));
        }
    });
}

#[test]
fn a_writable_export_points_at_the_buffer_it_owns() {
    let v = vec![1.0f32, 2.0, 3.0];
    let first = v.as_ptr();
    let mut t = Export::new(v).legacy().unwrap();
    assert_eq!(t.data_ptr().cast_const().cast(), first);
    t.as_mut_slice::<f32>().unwrap()[2] = 30.0;
    assert_eq!(t.as_slice::<f32>().unwrap(), &[1.0, 2.0, 30.0]);
}

#[test]
fn legacy_owner_made_read_only_refuses_writes_and_keeps_the_flag() {
    let t = Export::new(vec![1u8]).legacy().unwrap().into_read_only();
    let mut t = t.into_any();
    assert!(t.is_read_only());
    assert_eq!(t.as_mut_slice::<u8>().unwrap_err(), Error::ReadOnly);
    let v = Export::new(vec![1u8]).versioned().unwrap().into_read_only();
    let raw = v.into_raw();
    // SAFETY: handed back at once by the line above.
    let back = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
    assert!(back.is_read_only(), "into_raw hands the READ_ONLY flag on");
}

#[cfg(feature = "ndarray")]
#[test]
fn array_views_take_borrows_too() {
    let (a, mut b) = two_owners(6);
    let arr = a.as_array::<f32>().unwrap();
    assert_eq!(
        b.as_array_mut::<f32>().unwrap_err(),
        Error::AlreadyBorrowed { exclusive: true }
    );
    assert_eq!(arr.len(), 6);
    drop(arr);
    let mut w = b.as_array_mut::<f32>().unwrap();
    w[[0]] = 5.0;
    assert!(a.as_slice::<f32>().is_err());
    drop(w);
    assert_eq!(a.as_slice::<f32>().unwrap()[0], 5.0);
}
