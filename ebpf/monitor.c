/* assay-runner kernel monitor (BCC, tracepoints only).
 *
 * Which tasks are seen: the run's, by lineage (docs/architecture.md). The
 * `tasks` map holds every task of a run (host tid -> its slot, which carries
 * the run key and the syscall in flight). A task enters it when it joins a
 * cgroup listed in `run_cgroups` (the runner inserts the run's cgroup before
 * the command starts: starting a run is a map insert) or when a tracked task
 * creates it (task_newtask), and leaves it when it exits. Leaving the cgroup
 * changes nothing: the migration itself is recorded.
 *
 * Compile-time parameters (set by ebpf/monitor.py):
 *   RINGBUF_PAGES                    ring buffer size in pages
 *   WAKE_EVERY                       records per CPU between reader wakeups
 *   SYS_EXIT_RET_OFFSET              offset of `ret` in sys_exit_* records
 *   TASKS_MAX, TASKS_PER_RUN         live tasks tracked in all, and per run slot
 *   NO_GROUP_DEAD                    sched_process_exit has no group_dead field
 *   HELD_MAX                         interrupted calls held at once (`held`)
 *   HAVE_SYS_<NAME>                  the kernel has that optional syscall's tracepoints
 * ebpf/changes.c (namespaces, mounts, owners, times, xattrs, binds, memfds)
 * and ebpf/netpolicy.c are appended to this source (BCC only exports programs
 * defined in the main file), sharing its helpers and ring buffer.
 *
 * Design rules (see docs/architecture.md):
 *   - never read kernel struct fields: tracepoint args and helpers only;
 *   - one `tasks` lookup decides whether a syscall is the run's; the same
 *     slot keeps its saved arguments, so the hot path costs one map lookup
 *     at enter and one at exit;
 *   - one record per syscall: arguments saved at enter, joined at exit, user
 *     strings read at exit (at enter the page may not be resident yet);
 *   - every failed ring-buffer write is counted per hook (drops); every
 *     successful one too (emitted), so loss is a number, never a guess.
 */
#include "assay_events.h"

/* A tracked task: its run and the syscall it has in flight (hook 0: none). */
struct task_t {
    u64 ptr;
    u64 ptr2;
    s64 a0;
    s64 a1;
    s64 a2;
    s64 a3;
    u32 hook;
    u32 run;
    u32 interrupted; /* a call of this task exited with -ERESTART*: held in `held` */
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
BPF_HASH(tasks, u32, struct task_t, TASKS_MAX);
BPF_HASH(run_cgroups, u64, u32, RUN_SLOTS); /* cgroup v2 id -> run key */
/* A syscall that exited with -ERESTART* (a signal interrupted it), by host
 * tid, until the task's next joined syscall exits: a restart (the same call
 * again) replaces it, anything else writes its record, made at the
 * interruption and marked RET_INTERRUPTED with -EINTR. Rare, so it lives
 * apart from `tasks` and costs the hot path one flag test. */
struct held_t {
    struct task_t args;
    struct assay_rec rec;
};
BPF_HASH(held, u32, struct held_t, HELD_MAX);
BPF_PERCPU_ARRAY(held_scratch, struct held_t, 1);
/* Counters per run slot (key % RUN_SLOTS; slot 0: the run could not be known):
 * ring writes that failed and succeeded per hook, and tasks the full `tasks`
 * map could not take. One entry per slot, so user space reads a run's
 * counters with one lookup. */
struct run_counts {
    u64 drops[HOOK_MAX];
    u64 emitted[HOOK_MAX];
    u64 untracked;
};
BPF_PERCPU_ARRAY(counts, struct run_counts, RUN_SLOTS);
/* Live tasks in `tasks` per run slot: a run holds at most TASKS_PER_RUN of the
 * shared map, so one run's thread flood leaves the others their share (its own
 * excess is counted as its untracked tasks). User space zeroes a slot's entry
 * when a run starts and ends on it. */
BPF_ARRAY(live_tasks, s64, RUN_SLOTS);
BPF_PERCPU_ARRAY(scratch, struct assay_rec, 1);
BPF_PERCPU_ARRAY(since_wake, u64, 1);
/* Never written: lets tests read clang's layout of the header via BCC. */
BPF_ARRAY(layout_probe, struct assay_hdr, 1);

static __always_inline u32 tid_of(u64 id)
{
    return (u32)id;
}

/* The current task's slot when it belongs to a run, else 0. */
static __always_inline struct task_t *tracked(void)
{
    u32 tid = tid_of(bpf_get_current_pid_tgid());
    return tasks.lookup(&tid);
}

static __always_inline struct run_counts *counts_of(u32 run)
{
    u32 slot = run % RUN_SLOTS;
    return counts.lookup(&slot);
}

static __always_inline void count_untracked(u32 run)
{
    struct run_counts *c = counts_of(run);
    if (c)
        c->untracked++;
}

static __always_inline s64 *live_of(u32 run)
{
    u32 slot = run % RUN_SLOTS;
    return live_tasks.lookup(&slot);
}

/* One task of `run` left `tasks`. */
static __always_inline void untrack_one(u32 run)
{
    s64 *n = live_of(run);
    if (n)
        __sync_fetch_and_add(n, -1);
}

/* Adds `tid` to run `run`; a full map or the run's full share is counted, never silent. */
static __always_inline void track(u32 tid, u32 run)
{
    s64 *n = live_of(run);
    if (!n || *n >= TASKS_PER_RUN) {
        count_untracked(run);
        return;
    }
    struct task_t t = {};
    t.run = run;
    if (tasks.update(&tid, &t) != 0) {
        count_untracked(run);
        return;
    }
    __sync_fetch_and_add(n, 1);
}

/* Fills header `h` of a record about the current task; `run` is the run key it belongs to. */
static __always_inline void hdr_begin(struct assay_hdr *h, u32 hook, s64 ret, u32 run)
{
    u64 id = bpf_get_current_pid_tgid();
    h->ts = bpf_ktime_get_ns();
    h->tgid = id >> 32;
    h->tid = (u32)id;
    h->hook = hook;
    h->data_len = 0;
    h->truncated = 0;
    h->run = run;
    h->ret = ret;
    h->a0 = 0;
    h->a1 = 0;
    h->a2 = 0;
    h->a3 = 0;
}

/* Starts record `r`; `run` is the run key it belongs to. */
static __always_inline struct assay_rec *rec_begin_in(struct assay_rec *r, u32 hook, s64 ret, u32 run)
{
    hdr_begin(&r->h, hook, ret, run);
    return r;
}

/* Starts a record in the per-CPU scratch slot. */
static __always_inline struct assay_rec *rec_begin(u32 hook, s64 ret, u32 run)
{
    u32 zero = 0;
    struct assay_rec *r = scratch.lookup(&zero);
    return r ? rec_begin_in(r, hook, ret, run) : 0;
}

/* Writes the `size` bytes at `r`, a record of `hook` for run `run`, to the ring, and counts it. */
static __always_inline void rec_output(const void *r, u64 size, u32 hook, u32 run)
{
    /* BCC 0.26 cannot reference a map from bpf_ringbuf_query(), so wake the
     * reader every WAKE_EVERY records per CPU instead of by fill level. */
    u32 zero = 0;
    u64 flags = BPF_RB_NO_WAKEUP;
    u64 *n = since_wake.lookup(&zero);
    if (n && ++(*n) >= WAKE_EVERY) {
        *n = 0;
        flags = BPF_RB_FORCE_WAKEUP;
    }
    long failed = rb.ringbuf_output((void *)r, size, flags);
    struct run_counts *c = counts_of(run);
    if (!c || hook >= HOOK_MAX)
        return;
    if (failed)
        c->drops[hook]++;
    else
        c->emitted[hook]++;
}

static __always_inline void rec_submit(struct assay_rec *r)
{
    u64 size = sizeof(struct assay_hdr) + (r->h.data_len & (ASSAY_PAYLOAD_MAX - 1));
    if (r->h.data_len >= ASSAY_PAYLOAD_MAX)
        size = sizeof(struct assay_rec);
    rec_output(r, size, r->h.hook, r->h.run);
}

/* True when a string that filled a whole ASSAY_DATA_MAX read really ends
 * there (exactly ASSAY_DATA_MAX - 1 bytes), false when it goes on. */
static __always_inline int ends_at_max(u64 ptr)
{
    char c = 1;
    bpf_probe_read_user(&c, 1, (void *)(ptr + ASSAY_DATA_MAX - 1));
    return c == 0;
}

/* ends_at_max for a string in kernel memory (a tracepoint's __data_loc field). */
static __always_inline int ends_at_max_kernel(void *ptr)
{
    char c = 1;
    bpf_probe_read_kernel(&c, 1, ptr + ASSAY_DATA_MAX - 1);
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
        if (bpf_probe_read_user(&p, sizeof(p), (void *)(argv + i * sizeof(p))) != 0) {
            if (argv)
                trunc |= TRUNC_UNREAD; /* argv ends here as far as we know: say so */
            break;
        }
        if (!p)
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

/* Reads two user strings back to back (two-path syscalls): the first
 * NUL-terminated (an unreadable or NULL one is stored empty), the second after it. */
static __always_inline void rec_str2(struct assay_rec *r, u64 p1, u64 p2)
{
    u32 trunc = 0;
    long n = bpf_probe_read_user_str(r->data, ASSAY_DATA_MAX, (void *)p1);
    if (n <= 0) {
        r->data[0] = 0;
        n = 1;
        if (p1)
            trunc |= TRUNC_UNREAD;
    } else if (n >= ASSAY_DATA_MAX && !ends_at_max(p1)) {
        trunc |= TRUNC_FIRST;
    }
    /* the first string's NUL is at n - 1 < ASSAY_DATA_MAX: masking proves it */
    u32 nul = (n - 1) & (ASSAY_DATA_MAX - 1);
    u32 off = nul + 1;
    long m = bpf_probe_read_user_str(r->data + nul + 1, ASSAY_DATA_MAX, (void *)p2);
    if (m <= 0) {
        m = 0;
        trunc |= TRUNC_UNREAD;
    } else if (m >= ASSAY_DATA_MAX && !ends_at_max(p2)) {
        trunc |= TRUNC_SECOND;
    }
    r->h.data_len = off + m;
    r->h.truncated |= trunc;
}

/* Reads a user sockaddr of `len` bytes (capped at 128) into the payload. */
static __always_inline void rec_sockaddr(struct assay_rec *r, u64 ptr, s64 len)
{
    u64 n = len < 0 ? 0 : (u64)len;
    if (n > 128)
        n = 128;
    /* keep clang from folding the bound away before the verifier sees it */
    asm volatile("%0 &= 255" : "+r"(n));
    if (!n)
        return;
    if (bpf_probe_read_user(r->data, n, (void *)ptr) == 0)
        r->h.data_len = n;
    else
        r->h.truncated |= TRUNC_UNREAD;
}

/* Saves a syscall's enter arguments in the task's slot, for its exit. */
static __always_inline void save2(struct task_t *t, u32 hook, u64 ptr, u64 ptr2,
                                  s64 a0, s64 a1, s64 a2, s64 a3)
{
    t->hook = hook;
    t->ptr = ptr;
    t->ptr2 = ptr2;
    t->a0 = a0;
    t->a1 = a1;
    t->a2 = a2;
    t->a3 = a3;
}

static __always_inline void save(struct task_t *t, u32 hook, u64 ptr, s64 a0, s64 a1, s64 a2, s64 a3)
{
    save2(t, hook, ptr, 0, a0, a1, a2, a3);
}

#define ERESTART_LAST_ -512 /* -ERESTARTSYS; -ERESTARTNOINTR .. -ERESTART_RESTARTBLOCK follow */
#define ERESTART_FIRST_ -516
#define EINTR_ -4

/* An argument struct that could not be read at enter (page not resident),
 * read again at exit, when the kernel has faulted it in: openat2's `how`
 * (`ptr2`), sendmsg's msghdr (`ptr2`, then `ptr` is msg_name). Returns the
 * TRUNC_ARGS bit when it still cannot be read, -1 when there is nothing to
 * record (a sendmsg without an address). */
static __always_inline int reread_args(struct task_t *s)
{
    u64 ptr = s->ptr2;
    s->ptr2 = 0;
    if (s->hook == HOOK_OPEN) {
        struct open_how_t how = {};
        if (bpf_probe_read_user(&how, sizeof(how), (void *)ptr) != 0)
            return TRUNC_ARGS; /* a1 stays O_ACCMODE: access unknown */
        s->a1 = how.flags;
        s->a2 = how.mode;
        s->a3 = how.resolve;
    } else {
        struct user_msghdr_head_t m = {};
        if (bpf_probe_read_user(&m, sizeof(m), (void *)ptr) != 0)
            return TRUNC_ARGS;
        if (!m.name)
            return -1;
        s->ptr = m.name;
        s->a1 = m.namelen;
    }
    return 0;
}

/* Fills `r` with the record of a joined syscall from its saved arguments
 * `s`; returns nonzero when there is nothing to record. */
static __always_inline int fill(struct assay_rec *r, struct task_t *s, s64 ret, u32 flags)
{
    if (s->ptr2 && (s->hook == HOOK_OPEN || s->hook == HOOK_SENDMSG)) {
        int got = reread_args(s);
        if (got < 0)
            return 1;
        flags |= got;
    }
    rec_begin_in(r, s->hook, ret, s->run);
    r->h.a0 = s->a0;
    r->h.a1 = s->a1;
    r->h.a2 = s->a2;
    r->h.a3 = s->a3;
    r->h.truncated = flags;
    if (s->hook == HOOK_CONNECT || s->hook == HOOK_SENDTO || s->hook == HOOK_SENDMSG
        || s->hook == HOOK_BIND)
        rec_sockaddr(r, s->ptr, s->a1);
    else if (s->ptr2)
        rec_str2(r, s->ptr, s->ptr2);
    else if (s->ptr)
        rec_str(r, s->ptr);
    return 0;
}

/* The interrupted call `t` holds (its record was made when it was
 * interrupted, while its strings were still there): dropped when `now` is its
 * restart (the same call again: the restart is the one record), else written
 * as interrupted. `now` is null when the task ends. */
static __always_inline void settle_held(struct task_t *t, u32 tid, struct task_t *now)
{
    t->interrupted = 0;
    struct held_t *h = held.lookup(&tid);
    if (!h)
        return;
    struct task_t *was = &h->args;
    if (!(now && now->hook == was->hook && now->ptr == was->ptr && now->ptr2 == was->ptr2
          && now->a0 == was->a0 && now->a1 == was->a1))
        rec_submit(&h->rec);
    held.delete(&tid);
}

/* Holds an interrupted call's record until the task's next call says whether
 * the kernel restarted it; a full `held` map is a drop, never silent. */
static __always_inline void hold(struct task_t *t, u32 tid, struct task_t *s)
{
    u32 zero = 0;
    struct held_t *hs = held_scratch.lookup(&zero);
    if (!hs)
        return;
    s->interrupted = 0;
    hs->args = *s;
    if (fill(&hs->rec, s, EINTR_, RET_INTERRUPTED) != 0)
        return;
    if (held.update(&tid, hs) == 0) {
        t->interrupted = 1;
        return;
    }
    struct run_counts *c = counts_of(s->run);
    if (c && s->hook < HOOK_MAX)
        c->drops[s->hook]++;
}

/* Joins a syscall exit with its saved enter arguments and emits one record. */
static __always_inline void finish(s64 ret)
{
    u32 tid = tid_of(bpf_get_current_pid_tgid());
    struct task_t *t = tasks.lookup(&tid);
    if (!t || !t->hook)
        return;
    struct task_t s = *t;
    /* Mark consumed: the slot is reused by the thread's next syscall and
     * deleted when the thread exits (sched_process_exit below). */
    t->hook = 0;
    if (s.interrupted)
        settle_held(t, tid, &s);
    if (ret >= ERESTART_FIRST_ && ret <= ERESTART_LAST_) {
        /* Interrupted: the kernel restarts it or returns -EINTR after this
         * tracepoint, so wait for the task's next call to know which. */
        hold(t, tid, &s);
        return;
    }
    if (s.hook == HOOK_EXECVE && ret == 0)
        return; /* success: sched_process_exec said so, and the path is gone */
    u32 zero = 0;
    struct assay_rec *r = scratch.lookup(&zero);
    if (r && fill(r, &s, ret, 0) == 0)
        rec_submit(r);
}

/* One program for every traced sys_exit_* tracepoint (ebpf/monitor.py
 * attaches it to each): they share one layout, `long ret` at
 * SYS_EXIT_RET_OFFSET, which the loader reads from tracefs at run time and
 * checks is the same for all of them. One copy instead of nine also keeps the
 * compile short. */
int on_sys_exit(void *ctx)
{
    finish(*(long *)(ctx + SYS_EXIT_RET_OFFSET));
    return 0;
}

/* ---- opens ---------------------------------------------------------------- */

TRACEPOINT_PROBE(syscalls, sys_enter_openat)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    save(t, HOOK_OPEN, (u64)args->filename, args->dfd, args->flags, args->mode, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_openat2)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    struct open_how_t how = {};
    if (bpf_probe_read_user(&how, sizeof(how), (void *)args->how) == 0)
        save(t, HOOK_OPEN, (u64)args->filename, args->dfd, how.flags, how.mode, how.resolve);
    else /* read again at exit (reread_args); access unknown until then */
        save2(t, HOOK_OPEN, (u64)args->filename, (u64)args->how, args->dfd, 03 /* O_ACCMODE */, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_open)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    save(t, HOOK_OPEN, (u64)args->filename, -100 /* AT_FDCWD */, args->flags, args->mode, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_creat)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    /* creat() is open(O_CREAT|O_WRONLY|O_TRUNC) */
    save(t, HOOK_OPEN, (u64)args->pathname, -100, 01101, args->mode, 0);
    return 0;
}

/* ---- network -------------------------------------------------------------- */

TRACEPOINT_PROBE(syscalls, sys_enter_connect)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    save(t, HOOK_CONNECT, (u64)args->uservaddr, args->fd, args->addrlen, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_sendto)
{
    struct task_t *t = tracked();
    if (!t || !args->addr)
        return 0;
    save(t, HOOK_SENDTO, (u64)args->addr, args->fd, args->addr_len, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_sendmsg)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    struct user_msghdr_head_t m = {};
    if (bpf_probe_read_user(&m, sizeof(m), (void *)args->msg) != 0)
        save2(t, HOOK_SENDMSG, 0, (u64)args->msg, args->fd, 0, 0, 0); /* read again at exit */
    else if (m.name)
        save(t, HOOK_SENDMSG, m.name, args->fd, m.namelen, 0, 0);
    return 0;
}

/* ---- process tree and working directory ----------------------------------- */

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u32 tid = args->pid;
    u32 old = args->old_pid;
    if (old != tid) {
        /* A non-leader thread exec'd and took the leader's id: its slot moves. */
        struct task_t *o = tasks.lookup(&old);
        if (o) {
            if (o->interrupted) /* `held` is by tid: settle it before the id changes */
                settle_held(o, old, 0);
            struct task_t moved = *o;
            moved.hook = 0;
            if (tasks.update(&tid, &moved) != 0) {
                count_untracked(moved.run);
                untrack_one(moved.run);
            }
            tasks.delete(&old);
        }
    }
    struct task_t *t = tasks.lookup(&tid);
    if (!t)
        return 0;
    struct assay_rec *r = rec_begin(HOOK_EXEC, 0, t->run);
    if (!r)
        return 0;
    r->h.a0 = args->old_pid;
    /* filename is a __data_loc field: low 16 bits are its offset in args */
    u16 off = args->data_loc_filename & 0xFFFF;
    long n = bpf_probe_read_kernel_str(r->data, ASSAY_DATA_MAX, (void *)args + off);
    r->h.data_len = n < 0 ? 0 : n;
    if (n < 0)
        r->h.truncated = TRUNC_UNREAD;
    else if (n >= ASSAY_DATA_MAX && !ends_at_max_kernel((void *)args + off))
        r->h.truncated = TRUNC_FIRST;
    rec_submit(r);
    return 0;
}

/* A thread's slot goes with the thread, so the map holds live tasks only. */
TRACEPOINT_PROBE(sched, sched_process_exit)
{
    u32 tid = tid_of(bpf_get_current_pid_tgid());
    struct task_t *t = tasks.lookup(&tid);
    if (!t)
        return 0;
    if (t->interrupted)
        settle_held(t, tid, 0);
#ifndef NO_GROUP_DEAD
    if (args->group_dead)
#endif
    {   /* without group_dead (6.12 and older), every thread's exit: the last one is the group's */
        struct assay_rec *r = rec_begin(HOOK_PROC_EXIT, 0, t->run);
        if (r)
            rec_submit(r);
    }
    u32 run = t->run;
    if (tasks.delete(&tid) == 0)
        untrack_one(run);
    return 0;
}

/* ---- execs and how processes end -------------------------------------------
 * argv must be read at enter: a successful exec replaces the memory it lives
 * in. The exec's path is read at exit, and only a failed exec writes an exit
 * record (a successful one is sched_process_exec's record). */

static __always_inline void exec_enter(struct task_t *t, u64 path, u64 argv, s64 dirfd, s64 flags)
{
    struct assay_rec *r = rec_begin(HOOK_EXEC_ARGV, 0, t->run);
    if (r) {
        rec_argv(r, argv);
        rec_submit(r);
    }
    save(t, HOOK_EXECVE, path, dirfd, flags, 0, 0);
}

TRACEPOINT_PROBE(syscalls, sys_enter_execve)
{
    struct task_t *t = tracked();
    if (t)
        exec_enter(t, (u64)args->filename, (u64)args->argv, -100 /* AT_FDCWD */, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_execveat)
{
    struct task_t *t = tracked();
    if (t)
        exec_enter(t, (u64)args->filename, (u64)args->argv, args->fd, args->flags);
    return 0;
}

static __always_inline void exit_record(struct task_t *t, s64 status, s64 one_thread)
{
    struct assay_rec *r = rec_begin(HOOK_EXIT, 0, t->run);
    if (!r)
        return;
    r->h.a0 = status;
    r->h.a1 = one_thread;
    rec_submit(r);
}

TRACEPOINT_PROBE(syscalls, sys_enter_exit_group)
{
    struct task_t *t = tracked();
    if (t)
        exit_record(t, args->error_code, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_exit)
{
    struct task_t *t = tracked();
    if (t)
        exit_record(t, args->error_code, 1);
    return 0;
}

/* A fatal signal's number is not in any tracepoint of the dying task (the
 * kernel turns it into SIGKILL for each thread), so the signals sent to the
 * run are recorded where they are generated. */
TRACEPOINT_PROBE(signal, signal_generate)
{
    u32 target = args->pid;
    struct task_t *t = tasks.lookup(&target);
    if (!t)
        return 0;
    struct assay_rec *r = rec_begin(HOOK_SIGNAL, 0, t->run);
    if (!r)
        return 0;
    r->h.a0 = args->sig;
    r->h.a1 = args->pid;
    r->h.a2 = args->result;
    rec_submit(r);
    return 0;
}

/* A task created by a run task belongs to the run, wherever it goes. The
 * clone flags say when it was started in another cgroup (CLONE_INTO_CGROUP). */
TRACEPOINT_PROBE(task, task_newtask)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    u32 run = t->run;
    track(args->pid, run);
    struct assay_rec *r = rec_begin(HOOK_NEWTASK, 0, run);
    if (!r)
        return 0;
    r->h.a0 = args->pid;
    r->h.a1 = args->clone_flags;
    rec_submit(r);
    return 0;
}

/* Joining a run cgroup starts tracking (that is how the run's first task is
 * seeded); a tracked task moving to any cgroup is evidence. The record is
 * written in the context of whoever moved it; a0 names the task moved. */
TRACEPOINT_PROBE(cgroup, cgroup_attach_task)
{
    u32 pid = args->pid;
    struct task_t *moved = tasks.lookup(&pid);
    if (moved) {
        struct assay_rec *r = rec_begin(HOOK_CGROUP_ATTACH, 0, moved->run);
        if (!r)
            return 0;
        r->h.a0 = pid;
        r->h.a1 = args->dst_id;
        r->h.a2 = args->dst_level;
        r->h.a3 = args->dst_root;
        u16 off = args->data_loc_dst_path & 0xFFFF;
        long n = bpf_probe_read_kernel_str(r->data, ASSAY_DATA_MAX, (void *)args + off);
        r->h.data_len = n < 0 ? 0 : n;
        rec_submit(r);
        return 0;
    }
    if (args->dst_root != 0)
        return 0; /* a cgroup v1 hierarchy: its ids are not the v2 ids we know */
    u64 dst = args->dst_id;
    u32 *run = run_cgroups.lookup(&dst);
    if (run)
        track(pid, *run);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_chdir)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    save(t, HOOK_CHDIR, (u64)args->filename, 0, 0, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fchdir)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    save(t, HOOK_FCHDIR, 0, args->fd, 0, 0, 0);
    return 0;
}

/* ---- file system changes (docs/artifacts.md maps them to event_<id>) ------
 * Paths are read at exit like opens'; two-path syscalls carry both strings.
 * An fd-relative path keeps its dirfd, resolved by the normalizer. */

#define AT_FDCWD_ -100
#define AT_REMOVEDIR_ 0x200

TRACEPOINT_PROBE(syscalls, sys_enter_unlink)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_UNLINK, (u64)args->pathname, AT_FDCWD_, 0, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_unlinkat)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_UNLINK, (u64)args->pathname, args->dfd, args->flag, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_rmdir)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_UNLINK, (u64)args->pathname, AT_FDCWD_, AT_REMOVEDIR_, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_rename)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_RENAME, (u64)args->oldname, (u64)args->newname, AT_FDCWD_, AT_FDCWD_, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_renameat)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_RENAME, (u64)args->oldname, (u64)args->newname, args->olddfd, args->newdfd, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_renameat2)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_RENAME, (u64)args->oldname, (u64)args->newname, args->olddfd, args->newdfd,
              args->flags, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_mkdir)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_MKDIR, (u64)args->pathname, AT_FDCWD_, args->mode, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_mkdirat)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_MKDIR, (u64)args->pathname, args->dfd, args->mode, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_mknod)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_MKNOD, (u64)args->filename, AT_FDCWD_, args->mode, args->dev, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_mknodat)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_MKNOD, (u64)args->filename, args->dfd, args->mode, args->dev, 0);
    return 0;
}

/* symlink: first string the target text (never resolved), second the link. */
TRACEPOINT_PROBE(syscalls, sys_enter_symlink)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_SYMLINK, (u64)args->oldname, (u64)args->newname, AT_FDCWD_, 0, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_symlinkat)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_SYMLINK, (u64)args->oldname, (u64)args->newname, args->newdfd, 0, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_link)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_LINK, (u64)args->oldname, (u64)args->newname, AT_FDCWD_, AT_FDCWD_, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_linkat)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_LINK, (u64)args->oldname, (u64)args->newname, args->olddfd, args->newdfd,
              args->flags, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_truncate)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_TRUNCATE, (u64)args->path, AT_FDCWD_, args->length, 0, 0);
    return 0;
}

/* chmod family: a0 dirfd (or the fd for fchmod, with a3 = 1), a1 mode. */
TRACEPOINT_PROBE(syscalls, sys_enter_chmod)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_CHMOD, (u64)args->filename, AT_FDCWD_, args->mode, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fchmodat)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_CHMOD, (u64)args->filename, args->dfd, args->mode, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fchmodat2)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_CHMOD, (u64)args->filename, args->dfd, args->mode, args->flags, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fchmod)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_CHMOD, 0, args->fd, args->mode, 0, 1);
    return 0;
}

/* ---- what the fd table needs: closes and dups ------------------------------
 * The normalizer keeps each process's fd -> path table from these, to resolve
 * dirfds and /proc/self/fd/N reopens. A close is one header-only record at
 * enter (the fd is released even when close fails with EINTR). */

TRACEPOINT_PROBE(syscalls, sys_enter_close)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    struct assay_rec *r = rec_begin(HOOK_CLOSE, 0, t->run);
    if (!r)
        return 0;
    r->h.a0 = args->fd;
    rec_submit(r);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_close_range)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    struct assay_rec *r = rec_begin(HOOK_CLOSE_RANGE, 0, t->run);
    if (!r)
        return 0;
    r->h.a0 = args->fd;
    r->h.a1 = args->max_fd;
    r->h.a2 = args->flags;
    rec_submit(r);
    return 0;
}

/* dup family: a0 old fd, a1 the fd asked for (-1: lowest free), a2 flags. */
TRACEPOINT_PROBE(syscalls, sys_enter_dup)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_DUP, 0, args->fildes, -1, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_dup2)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_DUP, 0, args->oldfd, args->newfd, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_dup3)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_DUP, 0, args->oldfd, args->newfd, args->flags, 0);
    return 0;
}

#define F_DUPFD_ 0
#define F_DUPFD_CLOEXEC_ 1030
#define O_CLOEXEC_ 02000000

TRACEPOINT_PROBE(syscalls, sys_enter_fcntl)
{
    if (args->cmd != F_DUPFD_ && args->cmd != F_DUPFD_CLOEXEC_)
        return 0;
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_DUP, 0, args->fd, -1, args->cmd == F_DUPFD_CLOEXEC_ ? O_CLOEXEC_ : 0, 0);
    return 0;
}

/* ---- what the monitor cannot follow: recorded so health can say so -------- */

TRACEPOINT_PROBE(syscalls, sys_enter_io_uring_setup)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    struct assay_rec *r = rec_begin(HOOK_IO_URING, 0, t->run);
    if (!r)
        return 0;
    r->h.a0 = args->entries;
    rec_submit(r);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_open_by_handle_at)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_OPEN_BY_HANDLE, 0, args->mountdirfd, args->flags, 0, 0);
    return 0;
}

/* ---- another process's memory: ptrace attach, process_vm_readv/writev ------ */

#define PTRACE_TRACEME_ 0
#define PTRACE_ATTACH_ 16
#define PTRACE_SEIZE_ 0x4206

/* Only the requests that make a tracer: every other request needs one first. */
TRACEPOINT_PROBE(syscalls, sys_enter_ptrace)
{
    long request = args->request;
    if (request != PTRACE_ATTACH_ && request != PTRACE_SEIZE_ && request != PTRACE_TRACEME_)
        return 0;
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_PTRACE, 0, request, args->pid, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_process_vm_readv)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_PROCESS_VM, 0, args->pid, 0, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_process_vm_writev)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_PROCESS_VM, 0, args->pid, 1, 0, 0);
    return 0;
}
