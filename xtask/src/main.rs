//! `cargo xtask`: build the UMT kernel, boot it in QEMU, run the workspace inside.
//!
//! ```text
//! cargo xtask kernel build [--source PATH] [--debug|--rt]  # patched bzImage, cached by input hash
//! cargo xtask vm run [--kernel PATH] [--cpus N] [--mem M] [--file EXE] -- CMD...
//! cargo xtask vm test [--debug|--rt]                     # selftests + umt-sys/umt-rt tests in the guest
//! cargo xtask vm bench                                   # ping-pong and backends, in the guest
//! cargo xtask layers [CRATE_SRC...]                      # imports keep each crate's layer table
//! cargo xtask tests -p PKG... [--test NAME...] [-- ARGS]   # run `cargo test --workspace`'s
//!                                                        # executables again, no rebuild
//! ```
//!
//! Everything it builds lives under `target/xtask/`: the extracted and patched kernel trees,
//! the build directories, the initramfs staging area and the guest logs. Nothing is written
//! elsewhere, except that a missing `linux-source-6.12` package is installed with apt.

mod built;
mod guest;
mod kernel;
mod layers;
mod util;
mod vm;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "UMT kernel and VM automation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the patched Linux 6.12 kernel.
    #[command(subcommand)]
    Kernel(KernelCmd),
    /// Boot the kernel in QEMU and run things inside.
    #[command(subcommand)]
    Vm(VmCmd),
    /// Check that each crate's imports keep the layer table of its src/README.md (the test
    /// `layers::tests::the_workspace_crates_keep_their_layers` runs the same check).
    Layers {
        /// The crates' source folders (default: crates/umt-sys/src, crates/umt-rt/src,
        /// crates/umt-bench/src).
        srcs: Vec<PathBuf>,
    },
    /// Run again the test executables `cargo test --workspace` built, for these packages,
    /// without building them a second time (`cargo test -p PKG` would: cargo unifies features
    /// over the selected packages). No doc tests. CI's runs on another monitor and under load.
    Tests {
        /// A package whose test executables run (repeatable).
        #[arg(short = 'p', long = "package", value_name = "PKG", required = true)]
        packages: Vec<String>,
        /// Only this test target (`bpf_backend` for tests/bpf_backend.rs, `umt_rt` for the
        /// library's unit tests; repeatable).
        #[arg(long = "test", value_name = "NAME")]
        tests: Vec<String>,
        /// Arguments for each test executable (a filter, `--test-threads=1`).
        #[arg(last = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum KernelCmd {
    /// Apply kernel-patch/ to linux-source-6.12 (or --source) and build a small bzImage.
    Build(BuildArgs),
}

#[derive(Args, Clone, Default)]
pub(crate) struct BuildArgs {
    /// A Linux 6.12 tree to build instead of Debian's linux-source-6.12 (patched in place
    /// unless the series is already applied).
    #[arg(long)]
    pub(crate) source: Option<PathBuf>,
    /// Also enable PROVE_LOCKING, DEBUG_ATOMIC_SLEEP, KASAN and UBSAN_BOUNDS.
    #[arg(long, conflicts_with = "rt")]
    pub(crate) debug: bool,
    /// Build a PREEMPT_RT kernel with PROVE_LOCKING and DEBUG_ATOMIC_SLEEP.
    #[arg(long)]
    pub(crate) rt: bool,
    /// Build without the UMT series (the reference kernel of `vm bench`).
    #[arg(long, hide = true)]
    pub(crate) unpatched: bool,
}

#[derive(Args, Clone)]
pub(crate) struct VmArgs {
    /// Kernel image to boot (default: build the patched kernel, see `kernel build`).
    #[arg(long)]
    pub(crate) kernel: Option<PathBuf>,
    /// Virtual CPUs.
    #[arg(long, default_value_t = 4)]
    pub(crate) cpus: u32,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 4096)]
    pub(crate) mem: u32,
    /// Accelerator: auto (KVM if a probe boot works, else TCG), kvm or tcg.
    #[arg(long, default_value = "auto")]
    pub(crate) accel: vm::Accel,
    /// Give up on the guest after this many seconds.
    #[arg(long, default_value_t = 2400)]
    pub(crate) timeout: u64,
    /// TCG's threads: one per vCPU (multi), or one for all (single: every vCPU sees another's
    /// code patches at once). Default: single for `vm test`, multi for `vm run` and `vm bench`.
    #[arg(long, value_enum)]
    pub(crate) tcg_threads: Option<vm::TcgThreads>,
    /// Use (and build) the debug kernel.
    #[arg(long, conflicts_with = "rt")]
    pub(crate) debug: bool,
    /// Use (and build) the PREEMPT_RT kernel with lockdep.
    #[arg(long)]
    pub(crate) rt: bool,
}

#[derive(Subcommand)]
enum VmCmd {
    /// Boot the guest and run CMD in it (in /work, with the workspace binaries on PATH);
    /// exits with CMD's status.
    Run {
        #[command(flatten)]
        vm: VmArgs,
        /// Also copy this host executable into the guest, as /work/bin/NAME (repeatable).
        #[arg(long = "file", value_name = "PATH")]
        files: Vec<PathBuf>,
        /// The command line to run in the guest.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Run the kernel selftests and the umt-sys/umt-rt tests on the Kernel backend in the
    /// guest, and fail on any lockdep, KASAN, BUG or WARN report.
    Test {
        #[command(flatten)]
        vm: VmArgs,
    },
    /// Context-switch cost on the patched vs the unpatched kernel, and the backends compared.
    Bench {
        #[command(flatten)]
        vm: VmArgs,
        /// Alternating repeats of each kernel.
        #[arg(long, default_value_t = 5)]
        repeat: u32,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Kernel(KernelCmd::Build(args)) => kernel::build(&args).map(|k| {
            println!("{}", k.bzimage.display());
            0
        }),
        Command::Vm(VmCmd::Run { vm, files, cmd }) => vm::run_command(&vm, &files, &cmd),
        Command::Vm(VmCmd::Test { vm }) => guest::test(&vm),
        Command::Vm(VmCmd::Bench { vm, repeat }) => guest::bench(&vm, repeat),
        Command::Layers { srcs } => layers::run(&srcs),
        Command::Tests {
            packages,
            tests,
            args,
        } => built::run_tests(&packages, &tests, &args),
    };
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
