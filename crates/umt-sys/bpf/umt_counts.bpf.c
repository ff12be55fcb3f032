// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * umt_counts: per-CPU ready counts of one process's monitored threads, kept by BPF programs on
 * the scheduler's tracepoints in memory that the process maps, with a wake-up only when a
 * CPU's ready count drops to zero while the process waits for it. The loader is
 * `crates/umt-sys/src/monitor/bpf/`; the protocol, step by step, is in
 * `crates/umt-sys/src/monitor/README.md` ("The Bpf backend").
 *
 * Self-contained on purpose: it needs clang and nothing else (no libbpf headers, no
 * vmlinux.h). The kernel structures it reads are declared below with only the fields it uses;
 * clang records CO-RE relocations for them and the loader resolves them against the running
 * kernel's BTF.
 *
 * Needs Linux >= 5.18 (sched_switch's prev_state argument) with BTF, and BPF atomics (5.12).
 */

typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef _Bool bool;
#define true 1
#define false 0

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

/* The stable ABI values this file needs, from include/uapi/linux/bpf.h. */
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERF_EVENT_ARRAY 4
#define BPF_F_MMAPABLE (1U << 10)
#define BPF_F_CURRENT_CPU 0xffffffffULL

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u32 (*bpf_get_smp_processor_id)(void) = (void *)8;
static long (*bpf_perf_event_output)(void *ctx, void *map, __u64 flags, void *data,
				     __u64 size) = (void *)25;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)113;

/* Copies the kernel field `src` (relocated against the running kernel) into `dst`. */
#define READ_KERNEL(dst, src) \
	bpf_probe_read_kernel(&(dst), sizeof(dst), __builtin_preserve_access_index(&(src)))

/* include/linux/pid_namespace.h */
#define MAX_PID_NS_LEVEL 32

/* Only the fields read here; the loader relocates their offsets (CO-RE). */
struct thread_info {
	__u32 cpu;
} __attribute__((preserve_access_index));

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct pid_namespace {
	struct ns_common ns;
} __attribute__((preserve_access_index));

/* A task's id in one PID namespace; `struct pid` holds one per level, the last its own. */
struct upid {
	int nr;
	struct pid_namespace *ns;
};

struct pid {
	unsigned int level;
	struct upid numbers[1];
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_info thread_info;
	__s32 pid;
	__s32 tgid;
	struct pid *thread_pid;
} __attribute__((preserve_access_index));

/*
 * One per possible CPU, 128 bytes (two cache lines) so that CPUs do not share a line. Must
 * match `CpuCounts` in the loader.
 */
struct umt_cpu {
	__s64 ready;		/* monitored threads running or runnable on this CPU */
	__u64 blocks;		/* cumulative: a monitored thread blocked here */
	__u64 unblocks;		/* cumulative: a blocked monitored thread was woken onto here */
	__u64 migrations;	/* cumulative: a ready monitored thread moved here */
	__u64 drops;		/* cumulative: the ready count reached zero */
	__u64 notes;		/* cumulative: wake-ups sent for this CPU */
	__u64 armed;		/* written by the process: 1 while a waiter sleeps for this CPU */
	__u64 handoffs;		/* cumulative: handoff signals sent to a thread running here */
	__s64 over;		/* time with more than one ready: see add_ready */
	__u64 pad[7];
};

/* A thread's state word, in `slots`; every change is one compare-and-swap. */
#define ST_CPU_MASK 0xffffffffULL
#define ST_READY (1ULL << 32)	/* running or runnable on ST_CPU */
#define ST_ACTIVE (1ULL << 33)	/* registered; cleared by unregister or exit */
#define ST_EXITED (1ULL << 34)	/* the thread exited while registered */

/* A wake-up record: this CPU's ready count dropped to zero. */
struct note {
	__u32 cpu;
	__u32 drops;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct umt_cpu);
	__uint(max_entries, 1);	/* set to the number of possible CPUs by the loader */
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);	/* set to the slot capacity by the loader */
} slots SEC(".maps");

/* Monitored thread id -> its slot in `slots`. Written by the process; deleted at exit. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);	/* set to the slot capacity by the loader */
} threads SEC(".maps");

/* One perf buffer per CPU: the wake-ups for a waiter of that CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, 1);	/* set to the number of possible CPUs by the loader */
} notes SEC(".maps");

/*
 * The process whose threads count, set by the loader. In the initial PID namespace
 * (`target_ns` 0) the ids the process sees are the kernel's: `target_tgid` is its tgid and
 * `threads` is keyed by `task->pid`. Inside another PID namespace (a container) they are not:
 * `target_ns` is the inode of the process's namespace, `threads` is keyed by the thread id
 * the process sees (`gettid`, the task's id in its own, innermost, namespace), and
 * `seen_tgid` learns the kernel's tgid of the process from the first registered thread found
 * that way, after which it filters as cheaply as `target_tgid` does.
 */
const volatile __s32 target_tgid = 0;
const volatile __u32 target_ns = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __s32);
	__uint(max_entries, 1);
} seen_tgid SEC(".maps");

/*
 * Directed handoff (monitor/README.md, "Directed handoff", P1-P4). Loaded only when the process
 * asks for it (umt_handoff_switch and umt_handoff_wakeup; the counting programs above never
 * depend on them), and only where the kernel has the bpf_send_signal_task kfunc (6.13).
 *
 * `in_task`, per slot, written by the process: HANDOFF_IN_TASK while the thread runs a task
 * (user code); HANDOFF_ENABLED while it takes part at all. `running`, per CPU: the kernel tid of
 * the registered thread running there and its slot + 1 (bits 32..63), or 0; written at every
 * switch by that CPU, read by the wake-ups of other CPUs.
 */
#define HANDOFF_ENABLED 1U
#define HANDOFF_IN_TASK 2U

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);	/* an array's values are 8-byte aligned: u64 keeps the layout plain */
	__uint(max_entries, 1);	/* set to the slot capacity by the loader */
} in_task SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);	/* set to the number of possible CPUs by the loader */
} running SEC(".maps");

/*
 * The signal the process handles, and the value it carries (si_value; si_code is SI_KERNEL),
 * by which the process tells it from the same signal sent by anybody else. Set by the loader.
 */
const volatile __u32 handoff_signal = 0;
const volatile __u64 handoff_value = 0;

/* GPL-compatible for the kernel (bpf_probe_read_kernel is a GPL-only helper). */
char _license[] SEC("license") = "Dual MIT/GPL";

static __attribute__((always_inline)) struct umt_cpu *cpu_counts(__u32 cpu)
{
	return bpf_map_lookup_elem(&counts, &cpu);
}

/*
 * `p`'s id in its innermost PID namespace, into `tid`, when that namespace is `target_ns`
 * (what task_pid_vnr() gives the task itself). Each step reads through
 * bpf_probe_read_kernel: a task being torn down may have no `struct pid` any more.
 */
static __attribute__((always_inline)) bool ns_tid(struct task_struct *p, __u32 *tid)
{
	struct pid *pid;
	struct upid up;
	unsigned int level, inum;

	if (READ_KERNEL(pid, p->thread_pid) || !pid)
		return false;
	if (READ_KERNEL(level, pid->level) || level > MAX_PID_NS_LEVEL)
		return false;
	if (bpf_probe_read_kernel(&up, sizeof(up),
				  (char *)__builtin_preserve_access_index(&pid->numbers[0]) +
					  level * sizeof(struct upid)))
		return false;
	if (!up.ns || READ_KERNEL(inum, up.ns->ns.inum) || inum != target_ns)
		return false;
	*tid = up.nr;
	return true;
}

/*
 * The slot of a monitored thread of the target process (its entry in `threads`), or NULL;
 * `tid` gets the key it has there.
 */
static __attribute__((always_inline)) __u32 *thread_index(struct task_struct *p, __u32 *tid)
{
	__u32 zero = 0, *slot;
	__s32 *seen = 0;

	if (!p)
		return 0;
	if (!target_ns) {
		if (p->tgid != target_tgid)
			return 0;
		*tid = p->pid;
	} else {
		seen = bpf_map_lookup_elem(&seen_tgid, &zero);
		if (!seen || (*seen && p->tgid != *seen) || !ns_tid(p, tid))
			return 0;
	}
	slot = bpf_map_lookup_elem(&threads, tid);
	if (!slot)
		return 0;
	/* Only the target's threads are in `threads`, so this is the target's tgid. */
	if (seen && !*seen)
		*seen = p->tgid;
	return slot;
}

/*
 * The state word of a monitored thread of the target process, or NULL; `tid` gets the key it
 * has in `threads`.
 */
static __attribute__((always_inline)) __u64 *thread_slot(struct task_struct *p, __u32 *tid)
{
	__u32 *slot = thread_index(p, tid);

	if (!slot)
		return 0;
	return bpf_map_lookup_elem(&slots, slot);
}

/*
 * `cpu`'s ready count dropped to zero: counts it, and wakes its waiter if one armed it. The
 * record goes to the buffer of the CPU this runs on (a BPF program can write no other); that
 * is `cpu` for every drop a block or an exit causes. A migration run from another CPU sends
 * it there instead: the waiter of `cpu` then sees the drop at its next wait or timeout
 * (monitor/README.md, "The Bpf backend", races).
 */
static __attribute__((always_inline)) void dropped(void *ctx, struct umt_cpu *c, __u32 cpu)
{
	struct note n = { .cpu = cpu };

	n.drops = __sync_fetch_and_add(&c->drops, 1) + 1;
	if (!__sync_lock_test_and_set(&c->armed, 0))
		return;
	__sync_fetch_and_add(&c->notes, 1);
	bpf_perf_event_output(ctx, &notes, BPF_F_CURRENT_CPU, &n, sizeof(n));
}

/*
 * Adds `delta` (+1 or -1) to `cpu`'s ready count, and keeps in `over` the time the count
 * spends above one (monitor/README.md, "Time above one", O1-O4): a rise subtracts the clock
 * before its fetch-and-add and adds it back unless it crossed from one to two; a fall that
 * crossed from two to one adds the clock after its own. Crossings alternate in the order of
 * the fetch-and-adds, whichever CPUs make them, so `over` is the sum of the episodes that
 * ended minus the start of the one under way (negative while one is), plus the terms of the
 * rises under way, not yet taken back (the reader refuses a word with two minus terms).
 */
static __attribute__((always_inline)) void add_ready(void *ctx, __u32 cpu, __s64 delta)
{
	struct umt_cpu *c = cpu_counts(cpu);
	__s64 before, old;

	if (!c)
		return;
	if (delta > 0) {
		before = bpf_ktime_get_ns();
		__sync_fetch_and_add(&c->over, -before);
		if (__sync_fetch_and_add(&c->ready, delta) != 1)
			__sync_fetch_and_add(&c->over, before);
		return;
	}
	old = __sync_fetch_and_add(&c->ready, delta);
	if (old == 1)
		dropped(ctx, c, cpu);
	else if (old == 2)
		__sync_fetch_and_add(&c->over, (__s64)bpf_ktime_get_ns());
}

/* The cumulative counters of struct umt_cpu, for count(). */
enum counter { BLOCKS, UNBLOCKS, MIGRATIONS };

static __attribute__((always_inline)) void count(__u32 cpu, enum counter which)
{
	struct umt_cpu *c = cpu_counts(cpu);

	if (!c)
		return;
	if (which == BLOCKS)
		__sync_fetch_and_add(&c->blocks, 1);
	else if (which == UNBLOCKS)
		__sync_fetch_and_add(&c->unblocks, 1);
	else
		__sync_fetch_and_add(&c->migrations, 1);
}

/*
 * A ready thread found running on `cpu` while its word says another CPU (it moved while this
 * was not looking, for example between its registration and its first switch): move its count.
 */
static __attribute__((always_inline)) void settle_running(void *ctx, __u64 *st, __u32 cpu)
{
	__u64 old = *st, want;

	if (!(old & ST_ACTIVE))
		return;
	if ((old & ST_READY) && (old & ST_CPU_MASK) == cpu)
		return;
	want = (old & ~ST_CPU_MASK) | ST_READY | cpu;
	if (__sync_val_compare_and_swap(st, old, want) != old)
		return;
	add_ready(ctx, cpu, 1);
	if (old & ST_READY) {
		add_ready(ctx, old & ST_CPU_MASK, -1);
		count(cpu, MIGRATIONS);
	} else {
		count(cpu, UNBLOCKS);
	}
}

SEC("tp_btf/sched_switch")
int umt_switch(__u64 *ctx)
{
	bool preempt = ctx[0];
	struct task_struct *prev = (void *)ctx[1];
	struct task_struct *next = (void *)ctx[2];
	__u32 prev_state = ctx[3];
	__u32 cpu = bpf_get_smp_processor_id(), tid;
	__u64 *st;

	/* prev blocked: it leaves the runqueue (a preempted one, or one whose sleep a signal
	 * cancelled, reports TASK_RUNNING or preempt, and stays ready). */
	st = thread_slot(prev, &tid);
	if (st && !preempt && prev_state != 0) {
		__u64 old = *st;

		if ((old & ST_ACTIVE) && (old & ST_READY) &&
		    __sync_val_compare_and_swap(st, old, (old & ~(ST_READY | ST_CPU_MASK)) | cpu) ==
			    old) {
			count(cpu, BLOCKS);
			add_ready(ctx, old & ST_CPU_MASK, -1);
		}
	}
	st = thread_slot(next, &tid);
	if (st)
		settle_running(ctx, st, cpu);
	return 0;
}

/* A blocked thread becomes runnable on its target CPU: it counts there from now. */
static __attribute__((always_inline)) int woken(__u64 *ctx)
{
	struct task_struct *p = (void *)ctx[0];
	__u32 cpu, tid;
	__u64 *st = thread_slot(p, &tid);
	__u64 old, want;

	if (!st)
		return 0;
	old = *st;
	if (!(old & ST_ACTIVE) || (old & ST_READY))
		return 0;
	cpu = p->thread_info.cpu;
	want = (old & ~ST_CPU_MASK) | ST_READY | cpu;
	if (__sync_val_compare_and_swap(st, old, want) != old)
		return 0;
	count(cpu, UNBLOCKS);
	add_ready(ctx, cpu, 1);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int umt_wakeup(__u64 *ctx)
{
	return woken(ctx);
}

SEC("tp_btf/sched_wakeup_new")
int umt_wakeup_new(__u64 *ctx)
{
	return woken(ctx);
}

/* A ready thread moves between runqueues: its count follows. (A blocked one being woken onto
 * another CPU also passes here; its wake-up, next, counts it on the new CPU.) */
SEC("tp_btf/sched_migrate_task")
int umt_migrate(__u64 *ctx)
{
	struct task_struct *p = (void *)ctx[0];
	__u32 dest = ctx[1], tid;
	__u64 *st = thread_slot(p, &tid);
	__u64 old, want;

	if (!st)
		return 0;
	old = *st;
	if (!(old & ST_ACTIVE) || !(old & ST_READY) || (old & ST_CPU_MASK) == dest)
		return 0;
	want = (old & ~ST_CPU_MASK) | dest;
	if (__sync_val_compare_and_swap(st, old, want) != old)
		return 0;
	count(dest, MIGRATIONS);
	add_ready(ctx, dest, 1);
	add_ready(ctx, old & ST_CPU_MASK, -1);
	return 0;
}

/* A monitored thread exits: what it contributed is taken back, and it stops counting before
 * its last switch (which would otherwise look like a block). */
SEC("tp_btf/sched_process_exit")
int umt_exit(__u64 *ctx)
{
	struct task_struct *p = (void *)ctx[0];
	__u32 tid;
	__u64 *st = thread_slot(p, &tid);
	__u64 old;

	if (!st)
		return 0;
	/* The thread runs this itself, so nothing else changes its word meanwhile but a
	 * process-side unregister of another thread's slot, which cannot be this one. */
	old = *st;
	if ((old & ST_ACTIVE) &&
	    __sync_val_compare_and_swap(st, old, (old & ~ST_ACTIVE) | ST_EXITED) == old &&
	    (old & ST_READY))
		add_ready(ctx, old & ST_CPU_MASK, -1);
	bpf_map_delete_elem(&threads, &tid);
	return 0;
}

/*
 * Kernel functions (kfuncs) called by BTF id. aya, the loader, does not resolve `__ksym`
 * externs, so each call is written as the raw instruction (BPF_JMP | BPF_CALL, src_reg
 * BPF_PSEUDO_KFUNC_CALL) with a placeholder id in its immediate, which the loader replaces with
 * the function's id in the running kernel's BTF before loading (bpf.rs, `KFUNCS`: 0x55aa0001
 * bpf_task_from_pid, 0x55aa0002 bpf_send_signal_task, 0x55aa0003 bpf_task_release). Arguments
 * go in r1-r5, the result in r0, as for any call.
 */
#define KFUNC_CALL(placeholder) ".quad ((" #placeholder " << 32) | 0x2085)\n\t"

/* bpf_task_from_pid(): the task with kernel tid `pid`, referenced, or NULL. */
static __attribute__((always_inline)) struct task_struct *task_from_pid(__s32 pid)
{
	struct task_struct *ret;

	asm volatile("r1 = %[pid]\n\t" KFUNC_CALL(0x55aa0001) "%[ret] = r0"
		     : [ret] "=r"(ret)
		     : [pid] "r"((__s64)pid)
		     : "r0", "r1", "r2", "r3", "r4", "r5", "memory");
	return ret;
}

/* bpf_send_signal_task(task, sig, PIDTYPE_PID, value): a signal for that thread alone. */
static __attribute__((always_inline)) long send_signal_task(struct task_struct *t, __u32 sig,
							     __u64 value)
{
	long ret;

	asm volatile("r1 = %[t]\n\t"
		     "r2 = %[sig]\n\t"
		     "r3 = 0\n\t"
		     "r4 = %[value]\n\t" KFUNC_CALL(0x55aa0002) "%[ret] = r0"
		     : [ret] "=r"(ret)
		     : [t] "r"(t), [sig] "r"((__u64)sig), [value] "r"(value)
		     : "r0", "r1", "r2", "r3", "r4", "r5", "memory");
	return ret;
}

/* bpf_task_release(): drops the reference task_from_pid() took. */
static __attribute__((always_inline)) void task_release(struct task_struct *t)
{
	asm volatile("r1 = %[t]\n\t" KFUNC_CALL(0x55aa0003)
		     :
		     : [t] "r"(t)
		     : "r0", "r1", "r2", "r3", "r4", "r5", "memory");
}

/* P3: which registered thread runs on this CPU from now on. */
SEC("tp_btf/sched_switch")
int umt_handoff_switch(__u64 *ctx)
{
	struct task_struct *next = (void *)ctx[2];
	__u32 cpu = bpf_get_smp_processor_id(), tid;
	__u32 *slot = thread_index(next, &tid);
	__u64 *run = bpf_map_lookup_elem(&running, &cpu);

	if (!run)
		return 0;
	if (!slot || *slot >= 0x7fffffff) {
		if (*run)
			*run = 0;
		return 0;
	}
	*run = ((__u64)(*slot + 1) << 32) | (__u32)next->pid;
	return 0;
}

/*
 * P4: a registered thread that blocked inside a task is woken onto a CPU where another
 * registered thread runs inside a task: that one is signalled, so that it steps aside (in the
 * process) and the CPU runs the returned thread next.
 */
SEC("tp_btf/sched_wakeup")
int umt_handoff_wakeup(__u64 *ctx)
{
	struct task_struct *p = (void *)ctx[0], *t;
	__u32 tid, cpu, other, *slot;
	__u64 *woken_flags, *other_flags;
	__u64 *run, r;
	struct umt_cpu *c;

	slot = thread_index(p, &tid);
	if (!slot)
		return 0;
	woken_flags = bpf_map_lookup_elem(&in_task, slot);
	if (!woken_flags || !(*woken_flags & HANDOFF_IN_TASK))
		return 0;
	cpu = p->thread_info.cpu;
	run = bpf_map_lookup_elem(&running, &cpu);
	if (!run)
		return 0;
	r = *run;
	if (!r || (__u32)(r >> 32) == *slot + 1)
		return 0;
	other = (__u32)(r >> 32) - 1;
	other_flags = bpf_map_lookup_elem(&in_task, &other);
	if (!other_flags || (*other_flags & (HANDOFF_ENABLED | HANDOFF_IN_TASK)) !=
				    (HANDOFF_ENABLED | HANDOFF_IN_TASK))
		return 0;
	t = task_from_pid((__s32)r);
	if (!t)
		return 0;
	/* Never another process's thread (a tid reused since `running` was written). */
	if (t->tgid == p->tgid && !send_signal_task(t, handoff_signal, handoff_value)) {
		c = cpu_counts(cpu);
		if (c)
			__sync_fetch_and_add(&c->handoffs, 1);
	}
	task_release(t);
	return 0;
}
