/* The one definition of the raw record that ebpf/monitor.c writes to the ring
 * buffer. ebpf/wire.py decodes it; tests/test_wire_layout.py checks that the
 * Python layout matches what clang lays out here (sizes and offsets).
 *
 * Rule: nothing here (or in monitor.c) may read kernel struct fields. The
 * kernel headers on our machines do not match the running kernel, so only
 * tracepoint arguments (layout read from tracefs at run time) and helpers are
 * safe. The one exception, ebpf/kpath.c, takes its offsets from the running
 * kernel's BTF, never from a header.
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
#define HOOK_EXEC_ARGV 41 /* execve/execveat enter: argv, read at enter (gone at exit) */
#define HOOK_EXECVE 42   /* execve/execveat exit: written only when the exec failed */
#define HOOK_EXIT 43     /* exit_group/exit enter: the status the process asked for */
#define HOOK_SIGNAL 44   /* signal_generate to a tracked task (sender's context) */
#define HOOK_PROC_EXIT 45 /* sched_process_exit of a thread group's last thread */
#define HOOK_CGROUP_ATTACH 46 /* cgroup_attach_task moving a tracked task */
#define HOOK_CLOSE 47    /* close enter */
#define HOOK_CLOSE_RANGE 48 /* close_range enter */
#define HOOK_DUP 49      /* dup, dup2, dup3, fcntl(F_DUPFD*): joined enter+exit */
#define HOOK_UNLINK 50   /* unlink, unlinkat, rmdir: joined */
#define HOOK_RENAME 51   /* rename, renameat, renameat2: joined, two paths */
#define HOOK_MKDIR 52    /* mkdir, mkdirat: joined */
#define HOOK_SYMLINK 53  /* symlink, symlinkat: joined, target text + link path */
#define HOOK_LINK 54     /* link, linkat: joined, two paths */
#define HOOK_TRUNCATE 55 /* truncate (by path): joined */
#define HOOK_CHMOD 56    /* chmod, fchmodat, fchmodat2, fchmod: joined */
#define HOOK_IO_URING 57 /* io_uring_setup enter: its operations are not traced */
#define HOOK_OPEN_BY_HANDLE 58 /* open_by_handle_at: joined (no path exists) */
#define HOOK_MKNOD 59    /* mknod, mknodat: joined */
#define HOOK_UNSHARE 60  /* unshare: joined */
#define HOOK_SETNS 61    /* setns: joined */
#define HOOK_MOUNT 62    /* mount: joined, source + target */
#define HOOK_UMOUNT 63   /* umount2: joined */
#define HOOK_PIVOT_ROOT 64 /* pivot_root: joined, new root + put old */
#define HOOK_CHROOT 65   /* chroot: joined */
#define HOOK_OPEN_TREE 66 /* open_tree: joined */
#define HOOK_MOVE_MOUNT 67 /* move_mount: joined, from + to */
#define HOOK_FSMOUNT 68  /* fsmount: joined (no path) */
#define HOOK_CHOWN 69    /* chown, lchown, fchownat, fchown: joined */
#define HOOK_UTIMES 70   /* utimensat, futimesat, utimes, utime: joined */
#define HOOK_XATTR 71    /* setxattr, removexattr families: joined, path + attribute name */
#define HOOK_BIND 72     /* bind: joined, the address */
#define HOOK_MEMFD 73    /* memfd_create: joined, the name */
#define HOOK_PTRACE 80   /* ptrace ATTACH, SEIZE, TRACEME: joined */
#define HOOK_PROCESS_VM 81 /* process_vm_readv, process_vm_writev: joined */
#define HOOK_FILE_OPEN 85 /* security_file_open (fentry, ebpf/kpath.c): the kernel's path of an open */
#define HOOK_MAX 96      /* size of the per-hook counter array */

#define RUN_SLOTS 64     /* runs live at once; a run key's slot is key % RUN_SLOTS, slot 0 = unknown */

#define ASSAY_DATA_MAX 4096 /* PATH_MAX: the most one string takes */
#define ASSAY_PAYLOAD_MAX 8192 /* two strings (two-path syscalls, argv) */
#define ARGV_MAX 32      /* argv entries captured per exec */

/* `truncated` bits */
#define TRUNC_FIRST 1    /* the (first) string was longer than ASSAY_DATA_MAX - 1 */
#define TRUNC_SECOND 2   /* the second string was */
#define TRUNC_ARGV 4     /* argv had more entries than were captured */
#define TRUNC_UNREAD 8   /* a user string or argv pointer could not be read (page not resident) */
#define TRUNC_ARGS 16    /* an argument struct could not be read (openat2 how: a1 is O_ACCMODE,
                          * access unknown; sendmsg msghdr: no address; utimes times) */
#define RET_INTERRUPTED 32 /* a signal interrupted the call (-ERESTART* at exit) and it was not
                          * restarted: ret is -EINTR (a restarted call is only its restart's record) */

/* Fixed 64-byte header; `data_len` bytes of payload follow (a NUL-terminated
 * path, two of them back to back, argv entries, a raw sockaddr, or nothing). Argument meaning per hook:
 *   OPEN:    a0 dirfd, a1 flags, a2 mode, a3 resolve (openat2 only)
 *   CONNECT/SENDTO/SENDMSG: a0 fd, a1 sockaddr length
 *   EXEC:    a0 tid seen by the kernel before exec (old_pid)
 *   NEWTASK: a0 new task id, a1 clone flags
 *   CHDIR:   (none); FCHDIR: a0 fd
 *   EXEC_ARGV: a0 entries captured; payload: the entries, each NUL-terminated
 *   EXECVE:  a0 dirfd (AT_FDCWD for execve), a1 execveat flags; payload: path
 *   EXIT:    a0 status asked for, a1 0 for exit_group, 1 for exit (one thread)
 *   SIGNAL:  a0 signal, a1 target host tid, a2 kernel result (0 delivered)
 *   PROC_EXIT: (none): the record's tgid ended
 *   CGROUP_ATTACH: a0 host tid moved, a1 destination cgroup id, a2 its level,
 *            a3 hierarchy (0: cgroup v2); payload: destination path
 *   CLOSE:   a0 fd; CLOSE_RANGE: a0 first, a1 last, a2 flags
 *   DUP:     a0 old fd, a1 fd asked for (-1 lowest free), a2 O_CLOEXEC or 0
 *   UNLINK:  a0 dirfd, a1 flags (AT_REMOVEDIR for rmdir); payload: path
 *   RENAME/LINK: a0 old dirfd, a1 new dirfd, a2 flags; payload: old, new
 *   SYMLINK: a0 new dirfd; payload: target text, link path
 *   MKDIR/MKNOD: a0 dirfd, a1 mode (MKNOD: a2 dev); TRUNCATE: a0 dirfd (AT_FDCWD), a1 length
 *   CHMOD:   a0 dirfd (fd when a3 = 1: fchmod), a1 mode, a2 flags
 *   IO_URING: a0 entries; OPEN_BY_HANDLE: a0 mount dirfd, a1 flags
 *   PTRACE:  a0 request, a1 target host pid; PROCESS_VM: a0 target host pid, a1 1 for writev
 *   NET_BLOCK: a0 HOOK_CONNECT or HOOK_SENDMSG (what was denied), a1 IP protocol
 *   UNSHARE: a0 flags; SETNS: a0 fd, a1 nstype; FSMOUNT: a0 fs fd, a1 flags, a2 attr flags
 *   MOUNT:   a0 flags; payload: source (empty when NULL), target
 *   UMOUNT/CHROOT: a0 AT_FDCWD, a1 flags (umount2); payload: path
 *   PIVOT_ROOT: a0, a1 AT_FDCWD; payload: new root, put old
 *   OPEN_TREE: a0 dirfd, a1 flags; payload: path
 *   MOVE_MOUNT: a0 from dirfd, a1 to dirfd, a2 flags; payload: from path, to path
 *   CHOWN:   a0 dirfd (the fd for fchown: a3 has AT_EMPTY_PATH), a1 uid, a2 gid, a3 flags
 *   UTIMES:  a0 dirfd, a1 flags, a2 mtime seconds asked for, a3 0 now, 1 explicit times, 2 unread
 *   XATTR:   a0 dirfd (the fd when a3 = 1), a1 0 set / 1 remove, a2 value size, a3 1 by fd;
 *            payload: path (empty by fd), attribute name
 *   BIND:    a0 fd, a1 sockaddr length; payload: raw sockaddr
 *   MEMFD:   a0 flags; payload: the name asked for (ret: the fd)
 *   FILE_OPEN: ret the file's f_flags, a0 device, a1 inode, a2 mount namespace inode, a3 the
 *            joined hook the thread is inside (0: none); payload: d_path (ebpf/kpath.c)
 */
struct assay_hdr {
    unsigned long long ts;   /* bpf_ktime_get_ns() at syscall exit: the runner clock */
    unsigned int tgid;       /* host thread-group id */
    unsigned int tid;        /* host thread id */
    unsigned short hook;     /* HOOK_* */
    unsigned short data_len; /* payload bytes after the header */
    unsigned short truncated; /* TRUNC_* bits */
    unsigned short run;      /* run key of the task the record is about (0: unknown) */
    long long ret;           /* syscall return value (0 for tracepoints without one) */
    long long a0;
    long long a1;
    long long a2;
    long long a3;
};

struct assay_rec {
    struct assay_hdr h;
    char data[ASSAY_PAYLOAD_MAX];
};

#endif
