//! Directed handoff: the monitor signals a thread that runs inside a task on a CPU where a
//! thread that blocked inside a task was just woken, so that the running one steps aside and
//! the CPU runs the returned one next (`README.md`, "Directed handoff", P1–P4). The monitor
//! only sends the signal; stepping aside (parking until the CPU is free again) is the
//! runtime's part.

/// Whether a monitor runs the directed handoff ([`MonitorBuilder::directed_handoff`]).
///
/// [`MonitorBuilder::directed_handoff`]: crate::MonitorBuilder::directed_handoff
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Handoff {
    /// Not asked for.
    #[default]
    Off,
    /// Running: registered threads that set [`HANDOFF_ENABLED`] and [`HANDOFF_IN_TASK`] get
    /// `signal` when a thread that blocked with [`HANDOFF_IN_TASK`] set is woken onto their
    /// CPU.
    Active {
        /// The signal sent (the process must handle it: its default action may end the
        /// process).
        signal: i32,
    },
    /// Asked for, but this backend or kernel cannot run it: why.
    Unavailable(String),
}

/// The value a handoff signal carries (`si_value`, with `si_code == SI_KERNEL`): a handler
/// installed with `SA_SIGINFO` tells the monitor's signal from the same signal sent by anybody
/// else (`kill` gives `SI_USER`, a socket's out-of-band data `SI_KERNEL` with no value).
pub const HANDOFF_SIGNAL_VALUE: u32 = 0x756d_7448;

/// Thread flag: the thread takes part in the directed handoff (it may be signalled).
pub const HANDOFF_ENABLED: u32 = 1;
/// Thread flag: the thread runs a task (user code): a block now is one a returned thread
/// should get its CPU back from, and a thread running now may be asked to step aside.
pub const HANDOFF_IN_TASK: u32 = 2;

/// A registered thread's handle for its handoff flags ([`Monitor::handoff_flags`]); valid
/// while the thread stays registered.
///
/// [`Monitor::handoff_flags`]: crate::Monitor::handoff_flags
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandoffFlags {
    pub(super) slot: u32,
}
