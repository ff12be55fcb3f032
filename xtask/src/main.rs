//! `cargo xtask`: project automation. The kernel build and QEMU commands (`kernel build`,
//! `vm run`, `vm test`, `vm bench`) land with the kernel-patch issue.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    eprintln!(
        "cargo xtask {}: no commands yet; `kernel build` and `vm run|test|bench` are being built \
         (see kernel-patch/README.md)",
        args.join(" ")
    );
    std::process::ExitCode::from(2)
}
