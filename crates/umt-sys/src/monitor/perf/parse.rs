//! Reading what the kernel wrote: the fields of switch and lost records, and a thread's state
//! in `/proc` (for resynchronising after lost records).

use crate::cpu::CpuId;
use crate::ready::ThreadState;

/// Size of the `sample_id` trailer with `TID | TIME | CPU`: pid, tid, time, cpu, reserved.
pub(super) const SAMPLE_ID_LEN: usize = 24;

/// Largest record we configure: a `PERF_RECORD_LOST` (header, id, lost, sample_id).
pub(super) const MAX_RECORD_LEN: usize = 8 + 16 + SAMPLE_ID_LEN;

/// Fields of a switch or lost record's `sample_id` trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SampleId {
    pub tid: u32,
    pub time_ns: u64,
    pub cpu: u32,
}

/// Parses the `sample_id` at the end of a record body (`TID | TIME | CPU`).
pub(crate) fn parse_sample_id(body: &[u8]) -> Option<SampleId> {
    let start = body.len().checked_sub(SAMPLE_ID_LEN)?;
    let t = &body[start..];
    Some(SampleId {
        tid: u32::from_ne_bytes(t[4..8].try_into().ok()?),
        time_ns: u64::from_ne_bytes(t[8..16].try_into().ok()?),
        cpu: u32::from_ne_bytes(t[16..20].try_into().ok()?),
    })
}

/// Parses the `lost` field of a `PERF_RECORD_LOST` body (`u64 id; u64 lost; sample_id`).
pub(crate) fn parse_lost(body: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(body.get(8..16)?.try_into().ok()?))
}

/// A thread's state as `/proc/self/task/<tid>/stat` shows it: ready on its CPU when `R`,
/// blocked otherwise (or when it has exited).
pub(crate) fn proc_thread_state(tid: i32) -> ThreadState {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|s| parse_proc_stat(&s))
        .unwrap_or(ThreadState::Blocked)
}

/// Parses the state (field 3) and last CPU (field 39) of a `/proc/.../stat` line.
pub(crate) fn parse_proc_stat(stat: &str) -> Option<ThreadState> {
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?;
    let cpu: CpuId = fields.get(36)?.parse().ok()?;
    Some(if *state == "R" {
        ThreadState::Ready(cpu)
    } else {
        ThreadState::Blocked
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu;

    #[test]
    fn sample_id_trailer_parses() {
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_ne_bytes()); // pid
        body.extend_from_slice(&9u32.to_ne_bytes()); // tid
        body.extend_from_slice(&123_456u64.to_ne_bytes()); // time
        body.extend_from_slice(&3u32.to_ne_bytes()); // cpu
        body.extend_from_slice(&0u32.to_ne_bytes()); // reserved
        assert_eq!(
            parse_sample_id(&body),
            Some(SampleId {
                tid: 9,
                time_ns: 123_456,
                cpu: 3
            })
        );
        assert_eq!(parse_sample_id(&body[..10]), None);
        let mut lost = Vec::new();
        lost.extend_from_slice(&1u64.to_ne_bytes());
        lost.extend_from_slice(&42u64.to_ne_bytes());
        lost.extend_from_slice(&body);
        assert_eq!(parse_lost(&lost), Some(42));
    }

    #[test]
    fn proc_stat_parses_even_with_odd_names() {
        let line = "123 (a) b (c)) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 \
                    24 25 26 27 28 29 30 31 32 33 34 35 5 0 0";
        assert_eq!(parse_proc_stat(line), Some(ThreadState::Ready(5)));
        let sleeping = line.replace(") R ", ") S ");
        assert_eq!(parse_proc_stat(&sleeping), Some(ThreadState::Blocked));
        assert_eq!(parse_proc_stat("garbage"), None);
    }

    #[test]
    fn own_thread_state_is_running() {
        let cpu = cpu::current_cpu().unwrap();
        match proc_thread_state(cpu::current_tid()) {
            ThreadState::Ready(c) => assert!(c < cpu::possible_cpus().unwrap(), "{c} vs {cpu}"),
            ThreadState::Blocked => panic!("the reading thread must be running"),
        }
    }
}
