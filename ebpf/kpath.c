/* The kernel's own path of every file a run's task opens: a fentry program
 * on security_file_open (every open passes it, whatever the syscall: open,
 * openat, openat2, open_by_handle_at, io_uring's OPENAT, an exec's binary).
 *
 * Compiled only where ebpf/kpaths.py found fentry usable (KERNEL_PATHS
 * defined); elsewhere the runner reads paths from user memory as before and
 * health says `path_source=user_memory`. Appended to monitor.c by
 * ebpf/monitor.py, so it shares its `tasks` map and ring buffer.
 *
 * The one exception to monitor.c's rule "never read kernel struct fields":
 * the offsets below come from the running kernel's BTF (ebpf/btf.py), never
 * from a header, and the path itself is bpf_d_path's, whose argument the
 * verifier checks against BTF (a `struct path` at FILE_F_PATH of a `struct
 * file`, or the program does not load).
 *
 * Compile-time parameters (ebpf/kpaths.py, from BTF):
 *   FILE_F_PATH, FILE_F_INODE, FILE_F_FLAGS    in struct file
 *   PATH_MNT, MOUNT_MNT, MOUNT_MNT_NS          the file's mount and its namespace
 *   INODE_I_INO, INODE_I_SB, SB_S_DEV          in struct inode, super_block
 *   TASK_NSPROXY, NSPROXY_MNT_NS, MNT_NS_INUM  the task's mount namespace id
 *
 * Record (HOOK_FILE_OPEN): payload the path as the opener's root sees it
 * (d_path); a0 device (the kernel's dev_t: major << 20 | minor), a1 inode,
 * a2 the opener's mount namespace inode number, a3 the joined syscall the
 * thread is inside (task_t.hook: HOOK_OPEN, HOOK_OPEN_BY_HANDLE, HOOK_EXECVE,
 * or 0 for none: io_uring, an untraced call), ret the file's f_flags.
 *
 * No record for a file on a mount that belongs to no namespace: a stacked
 * filesystem's private clone of its lower mount (overlayfs since 6.6 opens
 * each file's real file with its own security_file_open, on a mount from
 * clone_private_mount whose mnt_ns is MNT_NS_INTERNAL). Its d_path is the
 * path inside the layer (`/hostname` for /etc/hostname), a name nobody can
 * open; the user's open of the same call has already been recorded, with
 * the path it was given.
 */
#ifdef KERNEL_PATHS
BPF_PERCPU_ARRAY(kpath_scratch, struct assay_rec, 1);

static __always_inline u64 kread(void *base, u32 offset, u32 size)
{
    u64 v = 0;
    if (base)
        bpf_probe_read_kernel(&v, size, base + offset);
    return v;
}

KFUNC_PROBE(security_file_open, void *file)
{
    struct task_t *t = tracked();
    if (!t)
        return 0;
    void *vfsmount = (void *)kread(file, FILE_F_PATH + PATH_MNT, 8);
    u64 ns = vfsmount ? kread(vfsmount - MOUNT_MNT, MOUNT_MNT_NS, 8) : 0;
    if (ns == 0 || ns >= (u64)-4095) /* NULL, or an ERR_PTR such as MNT_NS_INTERNAL */
        return 0;
    u32 zero = 0;
    struct assay_rec *r = kpath_scratch.lookup(&zero);
    if (!r)
        return 0;
    rec_begin_in(r, HOOK_FILE_OPEN, kread(file, FILE_F_FLAGS, 4), t->run);
    long n = bpf_d_path((struct path *)(file + FILE_F_PATH), r->data, ASSAY_DATA_MAX);
    r->h.data_len = n < 0 ? 0 : n; /* no path (too long, say): the requested string stays */
    void *inode = (void *)kread(file, FILE_F_INODE, 8);
    r->h.a0 = kread((void *)kread(inode, INODE_I_SB, 8), SB_S_DEV, 4);
    r->h.a1 = kread(inode, INODE_I_INO, 8);
    void *mnt_ns = (void *)kread((void *)kread((void *)bpf_get_current_task(), TASK_NSPROXY, 8),
                                 NSPROXY_MNT_NS, 8);
    r->h.a2 = kread(mnt_ns, MNT_NS_INUM, 4);
    r->h.a3 = t->hook;
    rec_submit(r);
    return 0;
}
#endif
