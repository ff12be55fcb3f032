//! `Auto` and seccomp: a process of its own (the test opens monitors, which would disturb the
//! descriptor counts of `kernel_backend.rs` in the patched guest).

use umt_sys::{BackendKind, Error, Monitor};

/// Installs a seccomp filter that allows every system call on the calling thread only (and
/// the threads it starts), as a sandbox or a systemd unit would. `false` where the kernel has
/// no seccomp filters (`EINVAL`: built without `CONFIG_SECCOMP_FILTER`; the xtask's guest
/// kernel has them).
fn allow_all_seccomp_filter() -> bool {
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
    let ret = unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            std::ptr::from_ref(&prog),
        )
    };
    if ret == 0 {
        return true;
    }
    let e = std::io::Error::last_os_error();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "seccomp: {e}");
    false
}

/// A filter's action for an unknown system call may be to kill the process, so `Auto` does not
/// call the placeholder number under one: the Kernel backend is rejected as not probed,
/// saying how to ask for it by name (which still works, in the patched guest).
#[test]
fn auto_does_not_probe_the_kernel_under_a_seccomp_filter() {
    let outcome = std::thread::spawn(|| {
        if !allow_all_seccomp_filter() {
            return None;
        }
        let auto = Monitor::new(BackendKind::Auto).expect("Auto always opens");
        let rejected = auto.selection().rejected.clone();
        drop(auto);
        Some((
            rejected,
            Monitor::new(BackendKind::Kernel).map(|m| m.backend()),
        ))
    })
    .join()
    .unwrap();
    // Where the Kernel backend is forced (the patched guest), the test must run.
    let forced = ["UMT_TEST_BACKEND", "UMT_REQUIRE_MONITOR"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|b| b == "kernel"));
    let Some((rejected, by_name)) = outcome else {
        assert!(
            !forced,
            "UMT_TEST_BACKEND=kernel but this kernel has no seccomp filters: build it with \
             CONFIG_SECCOMP_FILTER (xtask/src/kernel.config)"
        );
        eprintln!("skipped: this kernel has no seccomp filters (CONFIG_SECCOMP_FILTER)");
        return;
    };
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
    match by_name {
        Ok(kind) => assert_eq!(kind, BackendKind::Kernel),
        Err(e) if forced => panic!("UMT_TEST_BACKEND=kernel but by name: {e}"),
        Err(Error::Unavailable(u)) => assert!(!u.reason.contains("not probed"), "{u}"),
        Err(e) => panic!("{e}"),
    }
}
