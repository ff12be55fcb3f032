// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * noperf CMD [ARGS...]: runs CMD with perf_event_open failing with EACCES, as on a Debian
 * kernel at perf_event_paranoid=3 or in a container whose seccomp profile denies it. CI runs
 * the README's test command under it to check that the tests pass (skipping, saying why)
 * where no monitor can run.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct sock_filter f[] = {
        /* Another ABI's syscall numbers differ: allow those untouched. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_perf_event_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog p = { .len = sizeof(f) / sizeof(f[0]), .filter = f };
    if (argc < 2) { fprintf(stderr, "usage: noperf CMD [ARGS...]\n"); return 2; }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) { perror("no_new_privs"); return 1; }
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p)) { perror("seccomp"); return 1; }
    execvp(argv[1], argv + 1);
    perror("exec");
    return 1;
}
