//! One source of truth for the ABI: the values in `umt_sys::abi` must equal those the kernel
//! patch series in `kernel-patch/` adds to `include/uapi/linux/umt.h` and to the x86_64
//! syscall table.

use std::collections::BTreeMap;
use std::path::Path;

use umt_sys::abi;

/// Lines a patch series adds to the file `path`, in order.
fn added_lines(series: &str, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_file = false;
    for line in series.lines() {
        if let Some(target) = line.strip_prefix("+++ ") {
            in_file = target.trim() == format!("b/{path}");
        } else if line.starts_with("diff --git ") {
            in_file = false;
        } else if in_file && let Some(added) = line.strip_prefix('+') {
            out.push(added.to_owned());
        }
    }
    out
}

/// Evaluates the simple constant expressions a uapi header uses: integers in any base with
/// U/L suffixes, parentheses, `<<`, names defined before (`known`), and `_IO(type, nr)`
/// (x86_64's and aarch64's encoding: no direction bits, size 0).
fn eval(expr: &str, known: &BTreeMap<String, u64>) -> Option<u64> {
    let e = expr.trim();
    if let Some(args) = e.strip_prefix("_IO(").and_then(|e| e.strip_suffix(')')) {
        let (ty, nr) = args.split_once(',')?;
        return Some((eval(ty, known)? << 8) | eval(nr, known)?);
    }
    if let Some(inner) = e.strip_prefix('(').and_then(|e| e.strip_suffix(')')) {
        return eval(inner, known);
    }
    if let Some((a, b)) = e.split_once("<<") {
        return eval(a, known)?.checked_shl(u32::try_from(eval(b, known)?).ok()?);
    }
    if let Some(&v) = known.get(e) {
        return Some(v);
    }
    let digits = e.trim_end_matches(['u', 'U', 'l', 'L']);
    match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => digits.parse().ok(),
    }
}

/// `#define NAME VALUE` lines, values evaluated (macros with parameters left out).
fn defines(lines: &[String]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for l in lines {
        let Some(rest) = l.trim().strip_prefix("#define") else {
            continue;
        };
        let Some((name, value)) = rest.trim().split_once(char::is_whitespace) else {
            continue;
        };
        let Some(value) = value.split("/*").next() else {
            continue;
        };
        if let Some(v) = eval(value, &out) {
            out.insert(name.to_owned(), v);
        }
    }
    out
}

/// `NR abi name entry` lines of a syscall table, as name -> number.
fn syscalls(lines: &[String]) -> BTreeMap<String, i64> {
    lines
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.get(2)?.to_string(), f.first()?.parse().ok()?))
        })
        .collect()
}

fn rust_side() -> BTreeMap<&'static str, u64> {
    BTreeMap::from([
        ("UMT_ARGS_SIZE_VER0", abi::UMT_ARGS_SIZE_VER0 as u64),
        ("UMT_FD_CLOEXEC", abi::UMT_FD_CLOEXEC),
        ("UMT_FD_NONBLOCK", abi::UMT_FD_NONBLOCK),
        ("UMT_IDLE_ONLY", abi::UMT_IDLE_ONLY),
        ("UMT_SIGNAL_OVERSUB", abi::UMT_SIGNAL_OVERSUB),
        ("UMT_IOC_MAGIC", u64::from(abi::UMT_IOC_MAGIC)),
        ("UMT_IOC_CPU_FD", u64::from(abi::UMT_IOC_CPU_FD)),
        ("UMT_IOC_DISABLE", u64::from(abi::UMT_IOC_DISABLE)),
        ("UMT_THREAD_MONITOR", u64::from(abi::UMT_THREAD_MONITOR)),
        ("UMT_THREAD_UNMONITOR", u64::from(abi::UMT_THREAD_UNMONITOR)),
        (
            "UMT_EVENT_UNBLOCK_SHIFT",
            u64::from(abi::UMT_EVENT_UNBLOCK_SHIFT),
        ),
        ("UMT_EVENT_COUNT_MASK", abi::UMT_EVENT_COUNT_MASK),
    ])
}

/// The fields of the last `struct NAME` the series adds, with their byte offsets (`__s64`,
/// `__u64` and `__aligned_u64` members and arrays of them, as the header uses).
fn struct_layout(lines: &[String], name: &str) -> Vec<(String, usize)> {
    let open = format!("struct {name} {{");
    let Some(start) = lines.iter().rposition(|l| l.trim() == open) else {
        return Vec::new();
    };
    let mut offset = 0;
    let mut out = Vec::new();
    for l in &lines[start + 1..] {
        let l = l.trim();
        if l.starts_with('}') {
            break;
        }
        let Some(decl) = l.strip_suffix(';') else {
            continue;
        };
        let Some((_, name)) = decl.split_once(char::is_whitespace) else {
            continue;
        };
        let name = name.trim();
        let (name, count) = match name.split_once('[') {
            Some((n, len)) => (n, len.trim_end_matches(']').parse().unwrap_or(0)),
            None => (name, 1),
        };
        out.push((name.to_owned(), offset));
        offset += 8 * count;
    }
    out.push(("(size)".to_owned(), offset));
    out
}

fn named(fields: &[(&str, usize)]) -> Vec<(String, usize)> {
    fields.iter().map(|&(n, o)| (n.to_owned(), o)).collect()
}

/// `umt_sys::abi::UmtCounts`'s fields and offsets, in the header's names.
fn rust_counts_layout() -> Vec<(String, usize)> {
    use std::mem::{offset_of, size_of};
    named(&[
        ("ready", offset_of!(abi::UmtCounts, ready)),
        ("blocks", offset_of!(abi::UmtCounts, blocks)),
        ("unblocks", offset_of!(abi::UmtCounts, unblocks)),
        ("signals", offset_of!(abi::UmtCounts, signals)),
        ("drops", offset_of!(abi::UmtCounts, drops)),
        ("rises", offset_of!(abi::UmtCounts, rises)),
        ("__reserved", offset_of!(abi::UmtCounts, reserved)),
        ("(size)", size_of::<abi::UmtCounts>()),
    ])
}

/// `umt_sys::abi::UmtArgs`'s fields and offsets.
fn rust_args_layout() -> Vec<(String, usize)> {
    use std::mem::{offset_of, size_of};
    named(&[
        ("flags", offset_of!(abi::UmtArgs, flags)),
        ("(size)", size_of::<abi::UmtArgs>()),
    ])
}

/// Checks a patch series against `umt_sys::abi`; returns the mismatches.
fn mismatches(series: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let header_lines = added_lines(series, "include/uapi/linux/umt.h");
    let layout = struct_layout(&header_lines, "umt_counts");
    if layout != rust_counts_layout() {
        errors.push(format!(
            "struct umt_counts: header {layout:?}, umt-sys {:?}",
            rust_counts_layout()
        ));
    }
    let layout = struct_layout(&header_lines, "umt_args");
    if layout != rust_args_layout() {
        errors.push(format!(
            "struct umt_args: header {layout:?}, umt-sys {:?}",
            rust_args_layout()
        ));
    }
    let header = defines(&header_lines);
    for (name, value) in rust_side() {
        match header.get(name) {
            Some(&v) if v == value => {}
            Some(&v) => errors.push(format!("{name}: header {v:#x}, umt-sys {value:#x}")),
            None => errors.push(format!("{name}: missing from include/uapi/linux/umt.h")),
        }
    }
    let table = syscalls(&added_lines(
        series,
        "arch/x86/entry/syscalls/syscall_64.tbl",
    ));
    for (name, nr) in [
        ("umt_enable", abi::SYS_UMT_ENABLE),
        ("umt_thread_ctrl", abi::SYS_UMT_THREAD_CTRL),
    ] {
        if table.get(name) != Some(&nr) {
            errors.push(format!(
                "{name}: syscall table says {:?}, umt-sys says {nr}",
                table.get(name)
            ));
        }
    }
    errors
}

#[test]
fn abi_matches_kernel_patch() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernel-patch");
    let mut patches: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "patch"))
                .collect()
        })
        .unwrap_or_default();
    patches.sort();
    if patches.is_empty() {
        eprintln!(
            "no patch series in {} yet: nothing to compare",
            dir.display()
        );
        return;
    }
    let series: String = patches
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let errors = mismatches(&series);
    assert!(
        errors.is_empty(),
        "umt-sys and kernel-patch disagree:\n{}",
        errors.join("\n")
    );
}

/// The parts of a v3 series the checker reads, as `git format-patch` writes them (from the
/// v3 kernel's `include/uapi/linux/umt.h`).
const SAMPLE: &str = "\
diff --git a/arch/x86/entry/syscalls/syscall_64.tbl b/arch/x86/entry/syscalls/syscall_64.tbl
--- a/arch/x86/entry/syscalls/syscall_64.tbl
+++ b/arch/x86/entry/syscalls/syscall_64.tbl
@@ -1,1 +1,3 @@
 462 \tcommon  mseal\t\t\tsys_mseal
+471\tcommon\tumt_enable\t\tsys_umt_enable
+472\tcommon\tumt_thread_ctrl\t\tsys_umt_thread_ctrl
diff --git a/include/uapi/linux/umt.h b/include/uapi/linux/umt.h
--- /dev/null
+++ b/include/uapi/linux/umt.h
@@ -0,0 +1,40 @@
+#ifndef _UAPI_LINUX_UMT_H
+#define _UAPI_LINUX_UMT_H
+struct umt_args {
+\t__aligned_u64\tflags;
+};
+#define UMT_ARGS_SIZE_VER0\t8\t/* sizeof first published struct */
+#define UMT_FD_CLOEXEC\t\t0x00000001\t/* files are close-on-exec */
+#define UMT_FD_NONBLOCK\t\t0x00000002\t/* CPU files are non-blocking */
+#define UMT_IDLE_ONLY\t\t0x00000004\t/* signal drops to zero only */
+#define UMT_SIGNAL_OVERSUB\t0x00000008\t/* and rises to two */
+#define UMT_IOC_MAGIC\t\t0xb5
+#define UMT_IOC_CPU_FD\t\t_IO(UMT_IOC_MAGIC, 1)\t/* arg: the CPU */
+#define UMT_IOC_DISABLE\t\t_IO(UMT_IOC_MAGIC, 2)
+#define UMT_THREAD_MONITOR\t1\t/* start monitoring the calling thread */
+#define UMT_THREAD_UNMONITOR\t2\t/* stop monitoring the calling thread */
+#define UMT_EVENT_UNBLOCK_SHIFT\t32
+#define UMT_EVENT_COUNT_MASK\t0xffffffffULL
+#define UMT_EVENT_BLOCKED(word)\t((word) & UMT_EVENT_COUNT_MASK)
+struct umt_counts {
+\t__s64\tready;
+\t__u64\tblocks;
+\t__u64\tunblocks;
+\t__u64\tsignals;
+\t__u64\tdrops;
+\t__u64\trises;
+\t__u64\t__reserved[2];
+};
+#define UMT_COUNTS_SIZE(nr)\t((nr) * sizeof(struct umt_counts))
+#endif /* _UAPI_LINUX_UMT_H */
";

#[test]
fn the_checker_accepts_a_matching_series_and_rejects_a_drifted_one() {
    assert_eq!(mismatches(SAMPLE), Vec::<String>::new());
    let drifted = SAMPLE.replace("UMT_FD_NONBLOCK\t\t0x00000002", "UMT_FD_NONBLOCK\t\t0x4");
    let drifted = drifted.replace("+472", "+473");
    let errors = mismatches(&drifted);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].starts_with("UMT_FD_NONBLOCK"));
    assert!(errors[1].starts_with("umt_thread_ctrl"));
    // An ioctl renumbered, through its magic number.
    let errors = mismatches(&SAMPLE.replace("0xb5", "0xb6"));
    assert_eq!(errors.len(), 3, "{errors:?}");
    // A field the kernel moved, or one umt-sys does not know.
    let swapped = SAMPLE.replace("drops;\n+\t__u64\trises;", "rises;\n+\t__u64\tdrops;");
    let errors = mismatches(&swapped);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("struct umt_counts"), "{errors:?}");
    let grown = SAMPLE.replace("__reserved[2]", "__reserved[3]");
    assert_eq!(mismatches(&grown).len(), 1);
    let args = SAMPLE.replace("flags;\n", "flags;\n+\t__aligned_u64\tmore;\n");
    let errors = mismatches(&args);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("struct umt_args"), "{errors:?}");
    let missing = SAMPLE.replace("+#define UMT_IOC_DISABLE\t\t_IO(UMT_IOC_MAGIC, 2)\n", "");
    assert_eq!(
        mismatches(&missing),
        vec!["UMT_IOC_DISABLE: missing from include/uapi/linux/umt.h".to_owned()]
    );
}
