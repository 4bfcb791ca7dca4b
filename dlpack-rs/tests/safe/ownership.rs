//! Ownership: every export's keepalive is dropped exactly once, whichever way it is released,
//! and imported tensors call the producer's deleter exactly once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dlpack_rs::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY};
#[cfg(feature = "std")]
use dlpack_rs::safe::{cpu_device, TensorInfo};
use dlpack_rs::safe::{
    pack, pack_versioned, try_pack, Error, Export, ManagedTensor, ManagedTensorVersioned,
};

use crate::counted::counted;

#[test]
fn legacy_pack_then_deleter_drops_once() {
    let (keep, info, drops) = counted(4);
    let mt = pack(keep, info);
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    // SAFETY: `mt` is a live export; its deleter is called once.
    unsafe { ((*mt).deleter.expect("deleter is set"))(mt) };
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn versioned_pack_then_deleter_drops_once() {
    let (keep, info, drops) = counted(4);
    let mt = pack_versioned(keep, info, 0);
    // SAFETY: `mt` is a live export; read then delete once.
    unsafe {
        assert_eq!((*mt).version.major, 1);
        assert_eq!((*mt).version.minor, 3);
        assert!(
            !(*mt).dl_tensor.strides.is_null(),
            "strides are always written out"
        );
        ((*mt).deleter.expect("deleter is set"))(mt);
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn legacy_pack_wrapped_then_dropped_once() {
    let (keep, info, drops) = counted(6);
    let mt = pack(keep, info);
    // SAFETY: we own `mt` and hand it over.
    let owned = unsafe { ManagedTensor::from_raw(mt) }.expect("valid export");
    assert_eq!(owned.shape(), &[6]);
    assert_eq!(
        owned.as_slice::<f32>().unwrap(),
        &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    );
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(owned);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn versioned_pack_wrapped_then_dropped_once() {
    let (keep, info, drops) = counted(3);
    let mt = pack_versioned(keep, info, DLPACK_FLAG_BITMASK_READ_ONLY);
    // SAFETY: we own `mt` and hand it over.
    let mut owned = unsafe { ManagedTensorVersioned::from_raw(mt) }.expect("valid export");
    assert!(owned.is_read_only());
    assert_eq!(owned.as_mut_slice::<f32>(), Err(Error::ReadOnly));
    drop(owned);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn into_raw_hands_over_without_dropping() {
    let (keep, info, drops) = counted(2);
    // SAFETY: fresh export, owned here.
    let owned = unsafe { ManagedTensorVersioned::from_raw(pack_versioned(keep, info, 0)) }.unwrap();
    let raw: *mut DLManagedTensorVersioned = owned.into_raw();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    // SAFETY: `raw` is still live and owned by us now.
    let again = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
    drop(again);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn invalid_info_drops_keepalive_once_and_reports() {
    let (keep, mut info, drops) = counted(4);
    info.shape = vec![-1];
    assert_eq!(
        try_pack(keep, info).unwrap_err(),
        Error::NegativeDim {
            axis: 0,
            extent: -1
        }
    );
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
#[should_panic(expected = "invalid TensorInfo")]
fn pack_panics_on_invalid_info() {
    let (keep, mut info, _drops) = counted(4);
    info.strides = Some(vec![1, 1]);
    let _ = pack(keep, info);
}

#[test]
fn safe_export_drops_buffer_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    struct Tracked(Vec<u16>, Arc<AtomicUsize>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }
    // SAFETY: delegates to the inner Vec, which upholds the Buffer contract.
    unsafe impl dlpack_rs::safe::Buffer for Tracked {
        type Elem = u16;
        fn data_ptr(&self) -> *mut u16 {
            self.0.data_ptr()
        }
        fn num_elements(&self) -> usize {
            self.0.len()
        }
    }
    let t = Export::new(Tracked(vec![1, 2, 3, 4], drops.clone()))
        .shape(&[2usize, 2])
        .legacy()
        .unwrap();
    assert_eq!(t.as_slice::<u16>().unwrap(), &[1, 2, 3, 4]);
    let raw: *mut DLManagedTensor = t.into_raw();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    // SAFETY: the consumer side: call the deleter once.
    unsafe { ((*raw).deleter.unwrap())(raw) };
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn imported_tensor_dropped_on_another_thread() {
    let (keep, info, drops) = counted(8);
    // SAFETY: fresh export, owned here.
    let owned = unsafe { ManagedTensorVersioned::from_raw(pack_versioned(keep, info, 0)) }.unwrap();
    std::thread::spawn(move || drop(owned)).join().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[cfg(feature = "std")]
#[test]
fn panicking_keepalive_does_not_unwind_into_the_caller() {
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("keepalive drop panics");
        }
    }
    let mut data = [0u8; 4];
    let info = TensorInfo::contiguous(
        data.as_mut_ptr().cast(),
        cpu_device(),
        dlpack_rs::safe::dtype_u8(),
        vec![4],
    );
    let mt = pack_versioned(Bomb, info, 0);
    // The deleter is an `extern "C"` function: the panic must be contained inside it.
    // SAFETY: live export, deleted once.
    unsafe { ((*mt).deleter.unwrap())(mt) };
}

/// A keepalive whose panic payload itself panics when dropped: the deleter must contain that
/// second panic too. Run in a child process (the same test binary, on this one test), since
/// a panic escaping the `extern "C"` deleter aborts the process.
#[cfg(all(unix, feature = "std"))]
#[test]
fn panicking_panic_payload_does_not_unwind_into_the_caller() {
    const CHILD: &str = "DLPACK_RS_PAYLOAD_PANIC_CHILD";
    if std::env::var_os(CHILD).is_some() {
        struct Payload;
        impl Drop for Payload {
            fn drop(&mut self) {
                panic!("panic payload drop panics");
            }
        }
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                std::panic::panic_any(Payload);
            }
        }
        let mut data = [0u8; 4];
        let info = TensorInfo::contiguous(
            data.as_mut_ptr().cast(),
            cpu_device(),
            dlpack_rs::safe::dtype_u8(),
            vec![4],
        );
        let mt = pack_versioned(Bomb, info, 0);
        // SAFETY: live export, deleted once.
        unsafe { ((*mt).deleter.unwrap())(mt) };
        return;
    }
    // The test's name within this binary: its module path without the crate's name.
    let name = concat!(
        module_path!(),
        "::panicking_panic_payload_does_not_unwind_into_the_caller"
    );
    let name = name.split_once("::").unwrap().1;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the deleter did not contain the panic: {:?}\n{stdout}",
        out.status
    );
    // The child ran this test, not none (a name that matches nothing passes too).
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
}
