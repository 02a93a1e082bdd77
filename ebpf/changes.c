/* Namespaces, mounts and the rest of the change surface: owners, times,
 * xattrs, socket binds, memfds. Enter programs only (their exits are the
 * shared `on_sys_exit`, ebpf/monitor.py JOINED_SYSCALLS).
 *
 * Appended to monitor.c by ebpf/monitor.py (BCC exports programs from the
 * main source only), so it uses monitor.c's helpers (`tracked`, `save`,
 * `save2`) and constants (AT_FDCWD_).
 */

/* ---- namespaces and mounts: after these, paths may not be host paths ------
 * (clone/clone3 namespace flags are task_newtask's clone flags.) */

TRACEPOINT_PROBE(syscalls, sys_enter_unshare)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_UNSHARE, 0, args->unshare_flags, 0, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_setns)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_SETNS, 0, args->fd, args->flags, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_mount)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_MOUNT, (u64)args->dev_name, (u64)args->dir_name, args->flags, 0, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_umount)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_UMOUNT, (u64)args->name, AT_FDCWD_, args->flags, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_pivot_root)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_PIVOT_ROOT, (u64)args->new_root, (u64)args->put_old, AT_FDCWD_, AT_FDCWD_, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_chroot)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_CHROOT, (u64)args->filename, AT_FDCWD_, 0, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_open_tree)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_OPEN_TREE, (u64)args->filename, args->dfd, args->flags, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_move_mount)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_MOVE_MOUNT, (u64)args->from_pathname, (u64)args->to_pathname, args->from_dfd,
              args->to_dfd, args->flags, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fsmount)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_FSMOUNT, 0, args->fs_fd, args->flags, args->attr_flags, 0);
    return 0;
}

/* ---- the rest of the change surface: owners, times, xattrs, sockets, memfds */

#define AT_EMPTY_PATH_ 0x1000
#define AT_SYMLINK_NOFOLLOW_ 0x100

TRACEPOINT_PROBE(syscalls, sys_enter_chown)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_CHOWN, (u64)args->filename, AT_FDCWD_, args->user, args->group, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_lchown)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_CHOWN, (u64)args->filename, AT_FDCWD_, args->user, args->group, AT_SYMLINK_NOFOLLOW_);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fchownat)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_CHOWN, (u64)args->filename, args->dfd, args->user, args->group, args->flag);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fchown)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_CHOWN, 0, args->fd, args->user, args->group, AT_EMPTY_PATH_);
    return 0;
}

/* The times asked for: a2 the mtime seconds, a3 0 (now: no times), 1 (given), 2 (unreadable).
 * `stride`: bytes from atime to mtime (16: timespec, timeval; 8: utimbuf). */
#define UTIME_NOW_ ((1l << 30) - 1)
static __always_inline void save_utimes(struct task_t *t, u64 path, s64 dirfd, s64 flags, u64 times,
                                        u32 stride, int nsec)
{
    s64 mtime = 0, kind = 0;
    if (times) {
        s64 v[4] = {};
        if (bpf_probe_read_user(v, stride == 16 ? 32 : 16, (void *)times) != 0) {
            kind = 2;
        } else {
            mtime = stride == 16 ? v[2] : v[1];
            kind = (nsec && v[1] == UTIME_NOW_ && v[3] == UTIME_NOW_) ? 0 : 1;
        }
    }
    save(t, HOOK_UTIMES, path, dirfd, flags, mtime, kind);
}

TRACEPOINT_PROBE(syscalls, sys_enter_utimensat)
{
    struct task_t *t = tracked();
    if (t)
        save_utimes(t, (u64)args->filename, args->dfd, args->flags, (u64)args->utimes, 16, 1);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_futimesat)
{
    struct task_t *t = tracked();
    if (t)
        save_utimes(t, (u64)args->filename, args->dfd, 0, (u64)args->utimes, 16, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_utimes)
{
    struct task_t *t = tracked();
    if (t)
        save_utimes(t, (u64)args->filename, AT_FDCWD_, 0, (u64)args->utimes, 16, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_utime)
{
    struct task_t *t = tracked();
    if (t)
        save_utimes(t, (u64)args->filename, AT_FDCWD_, 0, (u64)args->times, 8, 0);
    return 0;
}

/* xattrs: path (none by fd) and the attribute's name, a1 0 set / 1 remove. */
TRACEPOINT_PROBE(syscalls, sys_enter_setxattr)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_XATTR, (u64)args->pathname, (u64)args->name, AT_FDCWD_, 0, args->size, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_lsetxattr)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_XATTR, (u64)args->pathname, (u64)args->name, AT_FDCWD_, 0, args->size, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fsetxattr)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_XATTR, 0, (u64)args->name, args->fd, 0, args->size, 1);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_removexattr)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_XATTR, (u64)args->pathname, (u64)args->name, AT_FDCWD_, 1, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_lremovexattr)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_XATTR, (u64)args->pathname, (u64)args->name, AT_FDCWD_, 1, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fremovexattr)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_XATTR, 0, (u64)args->name, args->fd, 1, 0, 1);
    return 0;
}

/* The *at forms (Linux 6.13), where this kernel has them (ebpf/monitor.py). */
#ifdef HAVE_SYS_SETXATTRAT
TRACEPOINT_PROBE(syscalls, sys_enter_setxattrat)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_XATTR, (u64)args->pathname, (u64)args->name, args->dfd, 0, 0,
              (args->at_flags & AT_EMPTY_PATH_) ? 1 : 0);
    return 0;
}
#endif

#ifdef HAVE_SYS_REMOVEXATTRAT
TRACEPOINT_PROBE(syscalls, sys_enter_removexattrat)
{
    struct task_t *t = tracked();
    if (t)
        save2(t, HOOK_XATTR, (u64)args->pathname, (u64)args->name, args->dfd, 1, 0,
              (args->at_flags & AT_EMPTY_PATH_) ? 1 : 0);
    return 0;
}
#endif

TRACEPOINT_PROBE(syscalls, sys_enter_bind)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_BIND, (u64)args->umyaddr, args->fd, args->addrlen, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_memfd_create)
{
    struct task_t *t = tracked();
    if (t)
        save(t, HOOK_MEMFD, (u64)args->uname, args->flags, 0, 0, 0);
    return 0;
}
