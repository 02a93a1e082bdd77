/* assay-runner kernel monitor (BCC, tracepoints only).
 *
 * Compile-time parameters (set by ebpf/monitor.py):
 *   RUN_CGROUP_ID, RUN_CGROUP_LEVEL  the run's cgroup v2 id and depth: only
 *                                    tasks in it or its descendants are seen
 *   RINGBUF_PAGES                    ring buffer size in pages
 *   WAKE_EVERY                       records per CPU between reader wakeups
 *   SYS_EXIT_RET_OFFSET              offset of `ret` in sys_exit_* records
 * With a network policy, ebpf/netpolicy.c is appended to this source (BCC
 * only exports programs defined in the main file), sharing its ring buffer.
 *
 * Design rules (see docs/architecture.md):
 *   - never read kernel struct fields: tracepoint args and helpers only;
 *   - filter on the cgroup before touching any map or the ring buffer;
 *   - one record per syscall: arguments saved at enter, joined at exit, user
 *     strings read at exit (at enter the page may not be resident yet);
 *   - every failed ring-buffer write is counted per hook (drops); every
 *     successful one too (emitted), so loss is a number, never a guess.
 */
#include "assay_events.h"

struct inflight_t {
    u64 ptr;
    s64 a0;
    s64 a1;
    s64 a2;
    s64 a3;
    u32 hook;
};

struct open_how_t {
    u64 flags;
    u64 mode;
    u64 resolve;
};

struct user_msghdr_head_t {
    u64 name;
    s32 namelen;
};

BPF_RINGBUF_OUTPUT(rb, RINGBUF_PAGES);
BPF_HASH(inflight, u32, struct inflight_t, 16384);
BPF_PERCPU_ARRAY(scratch, struct assay_rec, 1);
BPF_PERCPU_ARRAY(drops, u64, HOOK_MAX);
BPF_PERCPU_ARRAY(emitted, u64, HOOK_MAX);
BPF_PERCPU_ARRAY(since_wake, u64, 1);
/* Never written: lets tests read clang's layout of the header via BCC. */
BPF_ARRAY(layout_probe, struct assay_hdr, 1);

static __always_inline int in_run(void)
{
    return bpf_get_current_ancestor_cgroup_id(RUN_CGROUP_LEVEL) == RUN_CGROUP_ID;
}

static __always_inline u32 tid_of(u64 id)
{
    return (u32)id;
}

static __always_inline struct assay_rec *rec_begin(u32 hook, s64 ret)
{
    u32 zero = 0;
    struct assay_rec *r = scratch.lookup(&zero);
    if (!r)
        return 0;
    u64 id = bpf_get_current_pid_tgid();
    r->h.ts = bpf_ktime_get_ns();
    r->h.tgid = id >> 32;
    r->h.tid = (u32)id;
    r->h.hook = hook;
    r->h.data_len = 0;
    r->h.truncated = 0;
    r->h.ret = ret;
    r->h.a0 = 0;
    r->h.a1 = 0;
    r->h.a2 = 0;
    r->h.a3 = 0;
    return r;
}

static __always_inline void rec_submit(struct assay_rec *r)
{
    u32 hook = r->h.hook;
    u64 size = sizeof(struct assay_hdr) + (r->h.data_len & (ASSAY_PAYLOAD_MAX - 1));
    if (r->h.data_len >= ASSAY_PAYLOAD_MAX)
        size = sizeof(struct assay_rec);
    /* BCC 0.26 cannot reference a map from bpf_ringbuf_query(), so wake the
     * reader every WAKE_EVERY records per CPU instead of by fill level. */
    u32 zero = 0;
    u64 flags = BPF_RB_NO_WAKEUP;
    u64 *n = since_wake.lookup(&zero);
    if (n && ++(*n) >= WAKE_EVERY) {
        *n = 0;
        flags = BPF_RB_FORCE_WAKEUP;
    }
    if (rb.ringbuf_output(r, size, flags) == 0)
        emitted.increment(hook);
    else
        drops.increment(hook);
}

/* True when a string that filled a whole ASSAY_DATA_MAX read really ends
 * there (exactly ASSAY_DATA_MAX - 1 bytes), false when it goes on. */
static __always_inline int ends_at_max(u64 ptr)
{
    char c = 1;
    bpf_probe_read_user(&c, 1, (void *)(ptr + ASSAY_DATA_MAX - 1));
    return c == 0;
}

/* Reads a user string at `ptr` into the record payload. */
static __always_inline void rec_str(struct assay_rec *r, u64 ptr)
{
    long n = bpf_probe_read_user_str(r->data, ASSAY_DATA_MAX, (void *)ptr);
    if (n < 0) {
        n = 0;
        if (ptr)
            r->h.truncated |= TRUNC_UNREAD;
    }
    r->h.data_len = n;
    if (n >= ASSAY_DATA_MAX && !ends_at_max(ptr))
        r->h.truncated |= TRUNC_FIRST;
}

/* Reads up to ARGV_MAX argv entries into the payload, each NUL-terminated.
 * An entry cut at ASSAY_DATA_MAX sets TRUNC_FIRST, entries left out
 * TRUNC_ARGV, an unreadable one TRUNC_UNREAD (it is stored empty). */
static __always_inline void rec_argv(struct assay_rec *r, u64 argv)
{
    u32 off = 0;
    u32 trunc = 0;
    u32 i;
    for (i = 0; i < ARGV_MAX; i++) {
        u64 p = 0;
        if (bpf_probe_read_user(&p, sizeof(p), (void *)(argv + i * sizeof(p))) != 0 || !p)
            break;
        asm volatile("%0 &= 16383" : "+r"(off));
        if (off > ASSAY_PAYLOAD_MAX - ASSAY_DATA_MAX) {
            trunc |= TRUNC_ARGV;
            break;
        }
        long n = bpf_probe_read_user_str(r->data + off, ASSAY_DATA_MAX, (void *)p);
        if (n <= 0) {
            r->data[off] = 0;
            n = 1;
            trunc |= TRUNC_UNREAD;
        } else if (n >= ASSAY_DATA_MAX && !ends_at_max(p)) {
            trunc |= TRUNC_FIRST;
        }
        off += n;
    }
    if (i == ARGV_MAX) {
        u64 p = 0;
        if (bpf_probe_read_user(&p, sizeof(p), (void *)(argv + i * sizeof(p))) == 0 && p)
            trunc |= TRUNC_ARGV;
    }
    r->h.a0 = i;
    r->h.data_len = off;
    r->h.truncated = trunc;
}

/* Reads a user sockaddr of `len` bytes (capped at 128) into the payload. */
static __always_inline void rec_sockaddr(struct assay_rec *r, u64 ptr, s64 len)
{
    u64 n = len < 0 ? 0 : (u64)len;
    if (n > 128)
        n = 128;
    /* keep clang from folding the bound away before the verifier sees it */
    asm volatile("%0 &= 255" : "+r"(n));
    if (n && bpf_probe_read_user(r->data, n, (void *)ptr) == 0)
        r->h.data_len = n;
}

static __always_inline void save(u32 hook, u64 ptr, s64 a0, s64 a1, s64 a2, s64 a3)
{
    struct inflight_t f = {};
    f.hook = hook;
    f.ptr = ptr;
    f.a0 = a0;
    f.a1 = a1;
    f.a2 = a2;
    f.a3 = a3;
    u32 tid = tid_of(bpf_get_current_pid_tgid());
    if (inflight.update(&tid, &f) != 0)
        drops.increment(hook); /* table full: this syscall will be missing */
}

/* Joins a syscall exit with its saved enter arguments and emits one record. */
static __always_inline void finish(s64 ret)
{
    u32 tid = tid_of(bpf_get_current_pid_tgid());
    struct inflight_t *f = inflight.lookup(&tid);
    if (!f || !f->hook)
        return;
    struct inflight_t s = *f;
    /* Mark consumed instead of deleting (a delete per syscall cost about
     * 50 ns); the entry is reused by the thread's next syscall and deleted
     * when the thread exits (sched_process_exit below). */
    f->hook = 0;
    if (s.hook == HOOK_EXECVE && ret == 0)
        return; /* success: sched_process_exec said so, and the path is gone */
    struct assay_rec *r = rec_begin(s.hook, ret);
    if (!r)
        return;
    r->h.a0 = s.a0;
    r->h.a1 = s.a1;
    r->h.a2 = s.a2;
    r->h.a3 = s.a3;
    if (s.hook == HOOK_OPEN || s.hook == HOOK_CHDIR || s.hook == HOOK_EXECVE)
        rec_str(r, s.ptr);
    else if (s.hook == HOOK_CONNECT || s.hook == HOOK_SENDTO || s.hook == HOOK_SENDMSG)
        rec_sockaddr(r, s.ptr, s.a1);
    rec_submit(r);
}

/* One program for every traced sys_exit_* tracepoint (ebpf/monitor.py
 * attaches it to each): they share one layout, `long ret` at
 * SYS_EXIT_RET_OFFSET, which the loader reads from tracefs at run time and
 * checks is the same for all of them. One copy instead of nine also keeps the
 * compile short. */
int on_sys_exit(void *ctx)
{
    if (in_run())
        finish(*(long *)(ctx + SYS_EXIT_RET_OFFSET));
    return 0;
}

/* ---- opens ---------------------------------------------------------------- */

TRACEPOINT_PROBE(syscalls, sys_enter_openat)
{
    if (!in_run())
        return 0;
    save(HOOK_OPEN, (u64)args->filename, args->dfd, args->flags, args->mode, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_openat2)
{
    if (!in_run())
        return 0;
    struct open_how_t how = {};
    bpf_probe_read_user(&how, sizeof(how), (void *)args->how);
    save(HOOK_OPEN, (u64)args->filename, args->dfd, how.flags, how.mode, how.resolve);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_open)
{
    if (!in_run())
        return 0;
    save(HOOK_OPEN, (u64)args->filename, -100 /* AT_FDCWD */, args->flags, args->mode, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_creat)
{
    if (!in_run())
        return 0;
    /* creat() is open(O_CREAT|O_WRONLY|O_TRUNC) */
    save(HOOK_OPEN, (u64)args->pathname, -100, 01101, args->mode, 0);
    return 0;
}

/* ---- network -------------------------------------------------------------- */

TRACEPOINT_PROBE(syscalls, sys_enter_connect)
{
    if (!in_run())
        return 0;
    save(HOOK_CONNECT, (u64)args->uservaddr, args->fd, args->addrlen, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_sendto)
{
    if (!in_run() || !args->addr)
        return 0;
    save(HOOK_SENDTO, (u64)args->addr, args->fd, args->addr_len, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_sendmsg)
{
    if (!in_run())
        return 0;
    struct user_msghdr_head_t m = {};
    if (bpf_probe_read_user(&m, sizeof(m), (void *)args->msg) != 0 || !m.name)
        return 0;
    save(HOOK_SENDMSG, m.name, args->fd, m.namelen, 0, 0);
    return 0;
}

/* ---- process tree and working directory ----------------------------------- */

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    if (!in_run())
        return 0;
    struct assay_rec *r = rec_begin(HOOK_EXEC, 0);
    if (!r)
        return 0;
    r->h.a0 = args->old_pid;
    /* filename is a __data_loc field: low 16 bits are its offset in args */
    u16 off = args->data_loc_filename & 0xFFFF;
    long n = bpf_probe_read_kernel_str(r->data, ASSAY_DATA_MAX, (void *)args + off);
    r->h.data_len = n < 0 ? 0 : n;
    r->h.truncated = n >= ASSAY_DATA_MAX;
    rec_submit(r);
    return 0;
}

/* A thread's in-flight slot goes with the thread, so the table holds live
 * threads only. */
TRACEPOINT_PROBE(sched, sched_process_exit)
{
    if (in_run()) {
        u32 tid = tid_of(bpf_get_current_pid_tgid());
        inflight.delete(&tid);
        if (args->group_dead) {
            struct assay_rec *r = rec_begin(HOOK_PROC_EXIT, 0);
            if (r)
                rec_submit(r);
        }
    }
    return 0;
}

/* ---- execs and how processes end -------------------------------------------
 * argv must be read at enter: a successful exec replaces the memory it lives
 * in. The exec's path is read at exit, and only a failed exec writes an exit
 * record (a successful one is sched_process_exec's record). */

static __always_inline void exec_enter(u64 path, u64 argv, s64 dirfd, s64 flags)
{
    struct assay_rec *r = rec_begin(HOOK_EXEC_ARGV, 0);
    if (r) {
        rec_argv(r, argv);
        rec_submit(r);
    }
    save(HOOK_EXECVE, path, dirfd, flags, 0, 0);
}

TRACEPOINT_PROBE(syscalls, sys_enter_execve)
{
    if (in_run())
        exec_enter((u64)args->filename, (u64)args->argv, -100 /* AT_FDCWD */, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_execveat)
{
    if (in_run())
        exec_enter((u64)args->filename, (u64)args->argv, args->fd, args->flags);
    return 0;
}

static __always_inline void exit_record(s64 status, s64 one_thread)
{
    struct assay_rec *r = rec_begin(HOOK_EXIT, 0);
    if (!r)
        return;
    r->h.a0 = status;
    r->h.a1 = one_thread;
    rec_submit(r);
}

TRACEPOINT_PROBE(syscalls, sys_enter_exit_group)
{
    if (in_run())
        exit_record(args->error_code, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_exit)
{
    if (in_run())
        exit_record(args->error_code, 1);
    return 0;
}

/* A fatal signal's number is not in any tracepoint of the dying task (the
 * kernel turns it into SIGKILL for each thread), so the signals sent to the
 * run are recorded where they are generated. */
TRACEPOINT_PROBE(signal, signal_generate)
{
    if (!in_run())
        return 0;
    struct assay_rec *r = rec_begin(HOOK_SIGNAL, 0);
    if (!r)
        return 0;
    r->h.a0 = args->sig;
    r->h.a1 = args->pid;
    r->h.a2 = args->result;
    rec_submit(r);
    return 0;
}

TRACEPOINT_PROBE(task, task_newtask)
{
    if (!in_run())
        return 0;
    struct assay_rec *r = rec_begin(HOOK_NEWTASK, 0);
    if (!r)
        return 0;
    r->h.a0 = args->pid;
    r->h.a1 = args->clone_flags;
    rec_submit(r);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_chdir)
{
    if (!in_run())
        return 0;
    save(HOOK_CHDIR, (u64)args->filename, 0, 0, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fchdir)
{
    if (!in_run())
        return 0;
    save(HOOK_FCHDIR, 0, args->fd, 0, 0, 0);
    return 0;
}
