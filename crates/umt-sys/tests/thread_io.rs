//! `cpu::thread_io` counts what a thread made the kernel write to and read from storage.

#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::os::fd::AsFd;

use umt_sys::cpu;

/// A buffered write of 1 MiB counts as written once dirtied; after the file is synced and
/// dropped from the page cache, reading it back counts as read. Another thread's figures do
/// not move.
#[test]
fn a_threads_writes_and_cold_reads_are_counted_to_it() {
    let me = cpu::current_tid();
    let Ok(before) = cpu::thread_io(me) else {
        eprintln!("skipped: this kernel keeps no task I/O accounting (no /proc/self/task/*/io)");
        return;
    };
    // A private directory next to the build's outputs: a disk, where a memory file system
    // (the usual /tmp) would write nothing to storage.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (other_tx, other_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        other_tx.send(cpu::current_tid()).unwrap();
        let _ = done_rx.recv();
    });
    let other_tid = other_rx.recv().unwrap();
    let other_before = cpu::thread_io(other_tid).unwrap();

    const MIB: u64 = 1 << 20;
    let path = dir.path().join("data");
    let process_before = process_io();
    let mut f = std::fs::File::create_new(&path).unwrap();
    // Bytes that do not compress: a compressing file system (btrfs) would read back less.
    f.write_all(&incompressible(MIB as usize)).unwrap();
    f.sync_all().unwrap();
    let written = cpu::thread_io(me).unwrap();
    // The oracle: the process's own count. Where the file system accounts no storage
    // writes (memory-backed, an overlay over one, some FUSE), it does not move either.
    if process_io().written_bytes < process_before.written_bytes + MIB {
        eprintln!("skipped: this file system accounts no storage writes (a memory file system?)");
        return;
    }
    assert!(
        written.written_bytes >= before.written_bytes + MIB,
        "{before:?} -> {written:?}"
    );
    nix::fcntl::posix_fadvise(
        f.as_fd(),
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    )
    .unwrap();
    drop(f);
    let process_read = process_io().read_bytes;
    let mut back = Vec::new();
    std::fs::File::open(&path)
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back.len() as u64, MIB);
    let read = cpu::thread_io(me).unwrap();
    // The same oracle for reads (a network file system counts writes and not reads).
    if process_io().read_bytes < process_read + MIB {
        eprintln!("skipped the read: this file system accounts no storage reads");
        assert_eq!(cpu::thread_io(other_tid).unwrap(), other_before);
        done_tx.send(()).unwrap();
        other.join().unwrap();
        return;
    }
    // Pages another reader of the file brought in meanwhile could be served from the cache:
    // nobody else reads this private file, so all of it came from storage.
    assert!(
        read.read_bytes >= written.read_bytes + MIB,
        "{written:?} -> {read:?}"
    );
    assert_eq!(cpu::thread_io(other_tid).unwrap(), other_before);
    done_tx.send(()).unwrap();
    other.join().unwrap();
}

/// The whole process's `read_bytes` and `write_bytes` (`/proc/self/io`), parsed apart from
/// the code under test.
fn process_io() -> cpu::ThreadIo {
    let text = std::fs::read_to_string("/proc/self/io").unwrap();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    cpu::ThreadIo {
        read_bytes: field("read_bytes"),
        written_bytes: field("write_bytes"),
    }
}

/// `n` bytes of an xorshift stream.
fn incompressible(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
