//! Compiles the Bpf backend's program (`bpf/umt_counts.bpf.c`) with clang, when the `bpf`
//! feature is on and clang can target BPF. Otherwise the crate still builds: the backend then
//! reports itself unavailable with the reason recorded here (`UMT_BPF_UNAVAILABLE`).
//!
//! `UMT_BPF_CLANG` names another clang (default `clang` on the `PATH`).

use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "bpf/umt_counts.bpf.c";

fn main() {
    println!("cargo::rerun-if-changed={SOURCE}");
    println!("cargo::rerun-if-env-changed=UMT_BPF_CLANG");
    println!("cargo::rustc-check-cfg=cfg(umt_bpf)");
    if std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os != "linux") {
        unavailable("BPF programs of this kind run only on Linux");
        return;
    }
    if std::env::var_os("CARGO_FEATURE_BPF").is_none() {
        unavailable("umt-sys was built without its `bpf` feature");
        return;
    }
    let clang = std::env::var("UMT_BPF_CLANG").unwrap_or_else(|_| "clang".to_string());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out.join("umt_counts.bpf.o");
    let result = Command::new(&clang)
        .args([
            "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror", "-c", SOURCE, "-o",
        ])
        .arg(&object)
        .output();
    match result {
        Ok(o) if o.status.success() => {
            println!("cargo::rustc-cfg=umt_bpf");
            println!("cargo::rustc-env=UMT_BPF_OBJECT={}", object.display());
        }
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let first = err.lines().next().unwrap_or("no message").trim();
            println!("cargo::warning=the Bpf backend is not built: {clang} failed: {first}");
            unavailable(&format!(
                "umt-sys was built while `{clang}` could not compile its BPF program ({first})"
            ));
        }
        Err(e) => unavailable(&format!("umt-sys was built without clang (`{clang}`: {e})")),
    }
}

fn unavailable(reason: &str) {
    println!("cargo::rustc-env=UMT_BPF_UNAVAILABLE={reason}");
}
