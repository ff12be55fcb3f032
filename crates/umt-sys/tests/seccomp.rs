//! `Auto` and seccomp: a process of its own (the test opens monitors, which would disturb the
//! descriptor counts of `kernel_backend.rs` in the patched guest).

use umt_sys::{BackendKind, Error, Monitor};

/// Installs a seccomp filter that allows every system call on the calling thread only (and
/// the threads it starts), as a sandbox or a systemd unit would.
fn allow_all_seccomp_filter() {
    let code = (libc::BPF_RET | libc::BPF_K) as u16;
    let mut filter = [libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }];
    let prog = libc::sock_fprog {
        len: 1,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: plain prctl calls; `prog` points to a live one-instruction program that the
    // kernel copies before the call returns.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                std::ptr::from_ref(&prog)
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// A filter's action for an unknown system call may be to kill the process, so `Auto` does not
/// call the placeholder number under one: the Kernel backend is rejected as not probed,
/// saying how to ask for it by name (which still works, in the patched guest).
#[test]
fn auto_does_not_probe_the_kernel_under_a_seccomp_filter() {
    let (rejected, by_name) = std::thread::spawn(|| {
        allow_all_seccomp_filter();
        let auto = Monitor::new(BackendKind::Auto).expect("Auto always opens");
        let rejected = auto.selection().rejected.clone();
        drop(auto);
        (
            rejected,
            Monitor::new(BackendKind::Kernel).map(|m| m.backend()),
        )
    })
    .join()
    .unwrap();
    let kernel = rejected
        .iter()
        .find(|u| u.backend == BackendKind::Kernel)
        .expect("Auto tries the Kernel backend first");
    assert!(kernel.reason.contains("seccomp"), "{kernel}");
    assert!(
        kernel.to_string().contains("UMT_BACKEND=kernel"),
        "{kernel}"
    );
    // By name it is probed: it opens where the kernel has UMT v3 (forced in the guest).
    let forced = ["UMT_TEST_BACKEND", "UMT_REQUIRE_MONITOR"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|b| b == "kernel"));
    match by_name {
        Ok(kind) => assert_eq!(kind, BackendKind::Kernel),
        Err(e) if forced => panic!("UMT_TEST_BACKEND=kernel but by name: {e}"),
        Err(Error::Unavailable(u)) => assert!(!u.reason.contains("not probed"), "{u}"),
        Err(e) => panic!("{e}"),
    }
}
