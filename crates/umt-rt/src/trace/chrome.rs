//! The Chrome trace-event format (the "JSON Object Format" of the Trace Event Format
//! document, which Perfetto and `chrome://tracing` read).

use serde_json::{Value, json};

use super::{CoreState, Trace, TraceKind, TraceThread};

/// The thread id of a core's state track and of its leader, above any worker index.
const STATE_TID: u64 = 1 << 30;
const LEADER_TID: u64 = STATE_TID + 1;

fn tid(t: TraceThread) -> u64 {
    match t {
        TraceThread::Worker(i) => i as u64,
        TraceThread::Leader => LEADER_TID,
    }
}

pub(super) fn to_json(trace: &Trace) -> String {
    let t0 = trace.start_ns();
    let us = |ns: u64| ns.saturating_sub(t0) as f64 / 1000.0;
    let mut events: Vec<Value> = Vec::new();
    let meta = |pid: usize, tid: Option<u64>, name: String| {
        let (what, tid) = match tid {
            Some(t) => ("thread_name", t),
            None => ("process_name", 0),
        };
        json!({"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {"name": name}})
    };
    for (core, cpu) in trace.cpus().iter().enumerate() {
        events.push(meta(core, None, format!("core {core} (CPU {cpu})")));
        events.push(
            json!({"ph": "M", "name": "process_sort_index", "pid": core, "tid": 0,
                            "args": {"sort_index": core}}),
        );
        events.push(meta(core, Some(STATE_TID), "state".into()));
        events.push(meta(core, Some(LEADER_TID), "leader".into()));
        for s in trace.spans(core) {
            if s.state == CoreState::Idle {
                continue;
            }
            events.push(json!({
                "ph": "X", "name": s.state.name(), "cat": "state", "pid": core,
                "tid": STATE_TID, "ts": us(s.start_ns), "dur": us(s.end_ns) - us(s.start_ns),
            }));
        }
    }
    let mut named = std::collections::HashSet::new();
    let mut last_ready = vec![None; trace.cpus().len()];
    for r in trace.records() {
        let (pid, tid, ts) = (r.core, tid(r.thread), us(r.time_ns));
        if let TraceThread::Worker(i) = r.thread
            && named.insert((pid, i))
        {
            events.push(meta(pid, Some(tid), format!("worker {i}")));
        }
        let event = match r.kind {
            TraceKind::TaskStart => {
                json!({"ph": "B", "name": "task", "pid": pid, "tid": tid, "ts": ts})
            }
            TraceKind::TaskEnd => json!({"ph": "E", "pid": pid, "tid": tid, "ts": ts}),
            // A sample only: its count goes to the counter below.
            TraceKind::Chunk => serde_json::Value::Null,
            k => {
                let name = match k {
                    TraceKind::Park => "park",
                    TraceKind::Unpark => "unpark",
                    TraceKind::Surrender => "surrender",
                    TraceKind::SpareWoken => "spare woken",
                    TraceKind::LeaderWake => "leader wake-up",
                    TraceKind::Lent => "worker lent here",
                    TraceKind::Home => "lent worker home",
                    _ => "drain",
                };
                json!({"ph": "i", "s": "t", "name": name, "pid": pid, "tid": tid, "ts": ts,
                       "args": {"ready": r.ready}})
            }
        };
        if !event.is_null() {
            events.push(event);
        }
        if trace.monitored() && last_ready[r.core] != Some(r.ready) {
            last_ready[r.core] = Some(r.ready);
            events.push(
                json!({"ph": "C", "name": "ready", "pid": pid, "tid": 0, "ts": ts,
                               "args": {"ready": r.ready}}),
            );
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns"}).to_string()
}

#[cfg(test)]
mod tests {
    use super::super::{TraceRecord, TraceThread};
    use super::*;

    #[test]
    fn one_process_per_core_with_balanced_slices() {
        let rec = |time_ns, core, w, kind, ready| TraceRecord {
            time_ns,
            core,
            thread: TraceThread::Worker(w),
            kind,
            ready,
        };
        let trace = Trace::new(
            vec![4, 7],
            true,
            vec![
                rec(1000, 0, 0, TraceKind::TaskStart, 1),
                rec(2000, 1, 1, TraceKind::TaskStart, 1),
                rec(2500, 0, 0, TraceKind::TaskEnd, 1),
                rec(3000, 1, 1, TraceKind::TaskEnd, 0),
                rec(3500, 1, 1, TraceKind::Park, 0),
            ],
            4000,
        );
        let v: Value = serde_json::from_str(&trace.to_chrome_json()).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let processes: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(processes, ["core 0 (CPU 4)", "core 1 (CPU 7)"]);
        let count = |ph: &str| events.iter().filter(|e| e["ph"] == ph).count();
        assert_eq!(count("B"), 2);
        assert_eq!(count("E"), 2);
        let first_task = events.iter().find(|e| e["ph"] == "B").unwrap();
        assert_eq!(first_task["ts"].as_f64(), Some(0.0));
        assert!(
            events
                .iter()
                .any(|e| e["ph"] == "X" && e["name"] == "application")
        );
    }
}
