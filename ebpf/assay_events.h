/* The one definition of the raw record that ebpf/monitor.c writes to the ring
 * buffer. ebpf/wire.py decodes it; tests/test_wire_layout.py checks that the
 * Python layout matches what clang lays out here (sizes and offsets).
 *
 * Rule: nothing here (or in monitor.c) may read kernel struct fields. The
 * kernel headers on our machines do not match the running kernel, so only
 * tracepoint arguments (layout read from tracefs at run time) and helpers are
 * safe.
 */
#ifndef ASSAY_EVENTS_H
#define ASSAY_EVENTS_H

/* Hook ids. 1, 2, 4, 6, 7 are also the contract's event_type values. */
#define HOOK_OPEN 1      /* open, openat, openat2, creat: joined enter+exit */
#define HOOK_CONNECT 2   /* connect: joined enter+exit */
#define HOOK_EXEC 4      /* sched_process_exec: successful execs only */
#define HOOK_SENDTO 6    /* sendto with a destination address */
#define HOOK_SENDMSG 7   /* sendmsg with msg_name set */
#define HOOK_NEWTASK 32  /* task_newtask: process/thread creation */
#define HOOK_CHDIR 33    /* chdir: joined enter+exit */
#define HOOK_FCHDIR 34   /* fchdir: joined enter+exit */
#define HOOK_NET_BLOCK 40 /* network policy denial (cgroup sock_addr program) */
#define HOOK_MAX 41      /* size of the per-hook counter array */

#define ASSAY_DATA_MAX 4096 /* PATH_MAX; sockaddrs are far smaller */

/* Fixed 64-byte header; `data_len` bytes of payload follow (a NUL-terminated
 * path, a raw sockaddr, or nothing). Argument meaning per hook:
 *   OPEN:    a0 dirfd, a1 flags, a2 mode, a3 resolve (openat2 only)
 *   CONNECT/SENDTO/SENDMSG: a0 fd, a1 sockaddr length
 *   EXEC:    a0 tid seen by the kernel before exec (old_pid)
 *   NEWTASK: a0 new task id, a1 clone flags
 *   CHDIR:   (none); FCHDIR: a0 fd
 *   NET_BLOCK: a0 HOOK_CONNECT or HOOK_SENDMSG (what was denied), a1 IP protocol
 */
struct assay_hdr {
    unsigned long long ts;   /* bpf_ktime_get_ns() at syscall exit: the runner clock */
    unsigned int tgid;       /* host thread-group id */
    unsigned int tid;        /* host thread id */
    unsigned short hook;     /* HOOK_* */
    unsigned short data_len; /* payload bytes after the header */
    unsigned int truncated;  /* 1 when the payload hit ASSAY_DATA_MAX */
    long long ret;           /* syscall return value (0 for tracepoints without one) */
    long long a0;
    long long a1;
    long long a2;
    long long a3;
};

struct assay_rec {
    struct assay_hdr h;
    char data[ASSAY_DATA_MAX];
};

#endif
