//! Keep the kernel's UMT enabled, for as long as this process lives.
//!
//! ```text
//! cargo run -p umt-sys --example hold   # until killed
//! ```
//!
//! Opens a Kernel-backend [`Monitor`] (`umt_enable`), registers no thread, and sleeps until
//! killed. While any process has UMT enabled, the patched kernel's static key stays on, so
//! other processes enabling and disabling UMT do not patch the scheduler's code each time.
//! `cargo xtask vm test` runs it beside the test suites: under QEMU's TCG, a virtual CPU
//! running a scheduler path while another patched it took the patching `int3` as an oops
//! (seen twice, at different jump-label sites, never on hardware); the kernel selftests, which
//! test the key's flips, run before it starts.

use umt_sys::{BackendKind, Monitor};

fn main() {
    match Monitor::new(BackendKind::Kernel) {
        Ok(_monitor) => {
            println!("hold: UMT enabled; sleeping until killed");
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            eprintln!("hold: {e}");
            std::process::exit(1);
        }
    }
}
