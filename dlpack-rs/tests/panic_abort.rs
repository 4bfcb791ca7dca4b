//! Without the `std` feature a deleter cannot catch a panicking keepalive (`catch_unwind`
//! needs std), so the panic reaches the `extern "C"` deleter, where Rust aborts the process
//! instead of unwinding into the C caller. This test proves the abort in a child process:
//! the same test binary, re-run on the one test with an environment variable set.
//! (With `std`, tests/safe/ownership.rs proves the panic is caught and the deleter returns.)
#![cfg(all(unix, not(feature = "std")))]

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use dlpack_rs::safe::{cpu_device, dtype_u8, pack_versioned, TensorInfo};

const CHILD: &str = "DLPACK_RS_PANIC_ABORT_CHILD";

struct Bomb;
impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("keepalive drop panics");
    }
}

#[test]
fn panicking_keepalive_aborts_instead_of_unwinding_into_c() {
    if std::env::var_os(CHILD).is_some() {
        let mut data = [0u8; 4];
        let info =
            TensorInfo::contiguous(data.as_mut_ptr().cast(), cpu_device(), dtype_u8(), vec![4]);
        let mt = pack_versioned(Bomb, info, 0);
        // SAFETY: a live export, deleted once (by the C-ABI deleter, which must not unwind).
        unsafe { ((*mt).deleter.unwrap())(mt) };
        // Not reached: the process aborts inside the deleter.
        std::process::exit(0);
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "panicking_keepalive_aborts_instead_of_unwinding_into_c",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(6),
        "expected SIGABRT, got {:?}: {stderr}",
        out.status
    );
    assert!(stderr.contains("keepalive drop panics"), "{stderr}");
    assert!(
        stderr.contains("panic in a function that cannot unwind"),
        "{stderr}"
    );
}
