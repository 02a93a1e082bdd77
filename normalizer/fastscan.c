/* normalizer/fastscan.c: the normalizer's hot loops in C (module normalizer._fastscan).
 *
 * fast_records(batch, i, tasks, states, memo, older, held, tracked, order, room, ctx)
 *   -> (first record not taken, order, room)
 *
 * The same function as normalizer/scan.py's `fast_records`, which is its
 * pure-Python fallback and its reference: take records from batch[i] on while
 * each is a close, or an open whose answer is remembered in `memo` and that
 * transient names can ignore, of a known thread whose process has a state;
 * stop (without touching it) at the first record that is anything else, and
 * after the record that used the last `room`. With `ctx` (not None) it also
 * moves an answer from the `older` memo generation into `memo`, and works out
 * and remembers the answer of a *plain* open neither holds (`plain_answer`):
 * the answer Scan._open_answer gives, for the common case only; anything
 * else is left to Python.
 *
 * Hostile input: a record's header integers are read only after its length
 * is checked against the header and its payload (a short record is left to
 * Python, which reports it); the bytes after the task ids are compared as a
 * whole; a name is taken here only if it is printable ASCII without a
 * backslash and fits the join buffer, every other byte sequence goes to
 * Python's escaping. join_lines, join_indexed, shape_tails, index_shapes,
 * unseen_shapes, tails_of and collect_values are the C versions of
 * normalizer/kernel_lines.py join_lines/join_indexed/shape_tails, buckets.py
 * index_shapes and collector.py unseen_shapes/tails_of/collect_values;
 * any_folded of redact.py any_folded (defined at the end). The spool reader's
 * frame walk is the spool's own (spool/framescan.c).
 *
 * Built by scripts/setup.sh (`make setup`) with the machine's gcc; without it
 * the Python versions run, with identical output (tests/test_normspeed.py).
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the spool's record header is little-endian; this accelerator reads it natively"
#endif

#define HEADER_SIZE 64 /* struct assay_hdr, ebpf/wire.py HEADER */
#define HOOK_OPEN 1
#define HOOK_CLOSE 47
#define AT_FDCWD (-100)

#define EACCES_RET (-13)
#define ENOENT_RET (-2)
#define O_CREAT_BIT 0100
#define O_EXCL_BIT 0200
#define O_CLOEXEC_BIT 02000000
#define JOIN_MAX 8192 /* longest path worked out here; a longer one goes to Python */

static PyObject *s_process, *s_fds, *s_cwd;

/* Since the module loaded: records fast_records took, and plain opens it worked out itself
 * (`counters()`). Equal output proves the C agrees with Python when it acts; these show it acts
 * (tests/test_normspeed.py): a fast path that declined every record would agree too. */
static unsigned long long n_taken, n_plain;

static uint64_t u64_at(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t u32_at(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint16_t u16_at(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* What the scan passes for working out a plain open the memo does not hold (`OpenContext` in
 * normalizer/scan.py): (Classified, kind, metas, judging, telemetry prefixes, telemetry
 * substrings, memo limit, procfs link prefixes, transient.random_span). */
enum { CX_TYPE, CX_KIND, CX_METAS, CX_JUDGING, CX_TPREFIX, CX_TSUB, CX_LIMIT, CX_REOPEN, CX_RANDOM, CX_SIZE };

static int has(const char *hay, Py_ssize_t n, const char *needle, Py_ssize_t m)
{
    return m <= n && memmem(hay, (size_t)n, needle, (size_t)m) != NULL;
}

/* Does UTF-8 `s` start with one of the str prefixes (or hold one of the substrings) in tuple `t`?
 * -1 on error. On valid text, byte and character matching agree. */
static int any_of(PyObject *t, const char *s, Py_ssize_t n, int prefix)
{
    if (!PyTuple_Check(t))
        return -1;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(t); k++) {
        Py_ssize_t m;
        const char *x = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(t, k), &m);
        if (x == NULL)
            return -1;
        if (prefix ? (m <= n && memcmp(s, x, (size_t)m) == 0) : has(s, n, x, m))
            return 1;
    }
    return 0;
}

/* The memo answer of a plain open (new reference), as Scan._open_answer gives it: a whole
 * printable-ASCII name without a backslash, joined without posixpath (an absolute path already
 * normal, or one plain component under a normal absolute base), no path that may hold a procfs
 * link, no telemetry candidate (folded, or an event_83/84 line: Python decides), open metadata
 * already in `metas`. NULL without an exception: not plain,
 * Python works it out. A create (or an attempt that found no directory) is inert for transient
 * names only when no template calls its name random: TransientNames.inert asks random_span,
 * and so does this (a Python call, memoized there). */
static PyObject *plain_answer(PyObject *ctx, const unsigned char *p, PyObject *base, int64_t ret)
{
    uint16_t dlen = u16_at(p + 18), cut = u16_at(p + 20);
    int64_t flags = (int64_t)u64_at(p + 40), mode = (int64_t)u64_at(p + 48), resolve = (int64_t)u64_at(p + 56);
    const char *name = (const char *)p + HEADER_SIZE;
    Py_ssize_t n = (Py_ssize_t)strnlen(name, dlen);
    if (n == 0 || n > JOIN_MAX || cut /* cut, unread or interrupted: Python's way */
        || (PyTuple_GET_ITEM(ctx, CX_JUDGING) == Py_True && ret == EACCES_RET))
        return NULL;
    int creates = (flags & O_CREAT_BIT) && (ret >= 0 || ret == ENOENT_RET);
    for (Py_ssize_t k = 0; k < n; k++)
        if (name[k] < 0x20 || name[k] >= 0x7f || name[k] == '\\')
            return NULL;
    char buf[JOIN_MAX];
    Py_ssize_t size;
    if (name[0] == '/') {
        if (has(name, n, "//", 2) || has(name, n, "/.", 2) || name[n - 1] == '/')
            return NULL;
        memcpy(buf, name, (size_t)n);
        size = n;
    } else {
        if (memchr(name, '/', (size_t)n) || (n == 1 && name[0] == '.')
            || (n == 2 && name[0] == '.' && name[1] == '.') || !PyUnicode_CheckExact(base))
            return NULL;
        Py_ssize_t bn;
        const char *b = PyUnicode_AsUTF8AndSize(base, &bn);
        if (b == NULL) {
            PyErr_Clear();
            return NULL;
        }
        if (bn == 0 || b[0] != '/' || has(b, bn, "//", 2) || has(b, bn, "/.", 2) || b[bn - 1] == '/'
            || bn + 1 + n > (Py_ssize_t)sizeof buf)
            return NULL;
        memcpy(buf, b, (size_t)bn);
        buf[bn] = '/';
        memcpy(buf + bn + 1, name, (size_t)n);
        size = bn + 1 + n;
    }
    int hit = any_of(PyTuple_GET_ITEM(ctx, CX_REOPEN), buf, size, 1);
    if (hit == 0)
        hit = any_of(PyTuple_GET_ITEM(ctx, CX_TPREFIX), buf, size, 1);
    if (hit == 0)
        hit = any_of(PyTuple_GET_ITEM(ctx, CX_TSUB), buf, size, 0);
    if (hit != 0) {
        if (hit < 0)
            PyErr_Clear();
        return NULL;
    }
    PyObject *meta_key = Py_BuildValue("(LLLL)", (long long)flags, (long long)mode, (long long)resolve,
                                       (long long)(ret < 0 ? ret : 0));
    if (meta_key == NULL)
        return NULL;
    PyObject *meta = PyDict_GetItemWithError(PyTuple_GET_ITEM(ctx, CX_METAS), meta_key);
    Py_DECREF(meta_key);
    if (meta == NULL)
        return NULL;
    PyObject *path = PyUnicode_DecodeUTF8(buf, size, "strict");
    if (path == NULL)
        return NULL;
    PyObject *inert = Py_True;
    if (creates) {
        PyObject *argv[2] = {path, (flags & O_EXCL_BIT) ? Py_True : Py_False};
        PyObject *span = PyObject_Vectorcall(PyTuple_GET_ITEM(ctx, CX_RANDOM), argv, 2, NULL);
        if (span == NULL) {
            Py_DECREF(path);
            return NULL;
        }
        inert = span == Py_None ? Py_True : Py_False;
        Py_DECREF(span);
    }
    PyObject *event_type = PyLong_FromLong(HOOK_OPEN), *zero = PyLong_FromLong(0);
    PyObject *argv[6] = {event_type, PyTuple_GET_ITEM(ctx, CX_KIND), path, meta, zero, zero};
    PyObject *shape = event_type && zero
                          ? PyObject_Vectorcall(PyTuple_GET_ITEM(ctx, CX_TYPE), argv, 6, NULL) : NULL;
    Py_XDECREF(event_type);
    Py_XDECREF(zero);
    PyObject *fd_entry = NULL;
    if (shape != NULL && ret >= 0)
        fd_entry = Py_BuildValue("(OO)", path, (flags & O_CLOEXEC_BIT) ? Py_True : Py_False);
    Py_DECREF(path);
    if (shape == NULL || (ret >= 0 && fd_entry == NULL)) {
        Py_XDECREF(shape);
        return NULL;
    }
    PyObject *answer = PyTuple_Pack(4, fd_entry ? fd_entry : Py_None, shape, Py_False, inert);
    Py_XDECREF(fd_entry);
    Py_DECREF(shape);
    return answer;
}


/* The base directory of an open (new reference), as PathResolver._join picks it:
 * none for an absolute payload, the cwd for AT_FDCWD, else the dirfd's path.
 * NULL with an exception set on error; NULL without one when the fd table holds
 * something that is not a (path, cloexec) tuple (left to Python). */
static PyObject *open_base(PyObject *state, PyObject *fds, PyObject *fd_obj, int32_t fd,
                           const unsigned char *payload, uint16_t dlen)
{
    if (dlen && payload[0] == '/')
        Py_RETURN_NONE;
    if (fd == AT_FDCWD)
        return PyObject_GetAttr(state, s_cwd);
    PyObject *entry = PyDict_GetItemWithError(fds, fd_obj);
    if (entry == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 1)
        return NULL;
    PyObject *base = PyTuple_GET_ITEM(entry, 0);
    Py_INCREF(base);
    return base;
}

/* The memo's answer for `key` (new reference), else the older generation's or the plain
 * answer, remembered in the memo; NULL without an exception when Python must work it out
 * (the memo is full, the open is not plain). */
static PyObject *answer_for(PyObject *key, PyObject *memo, PyObject *older, PyObject *ctx,
                            const unsigned char *p, PyObject *base, int64_t ret)
{
    PyObject *hit = PyDict_GetItemWithError(memo, key);
    if (hit != NULL) {
        Py_INCREF(hit);
        return hit;
    }
    if (PyErr_Occurred() || ctx == Py_None)
        return NULL;
    if (!PyTuple_Check(ctx) || PyTuple_GET_SIZE(ctx) != CX_SIZE) {
        PyErr_SetString(PyExc_TypeError, "fast_records: ctx is not an OpenContext");
        return NULL;
    }
    long long limit = PyLong_AsLongLong(PyTuple_GET_ITEM(ctx, CX_LIMIT));
    if (PyErr_Occurred() || PyDict_GET_SIZE(memo) >= limit)
        return NULL; /* Python starts a new generation */
    /* the older generation's answer moves to the current one, as Scan._remember does */
    PyObject *answer = PyDict_GetItemWithError(older, key);
    if (answer != NULL)
        Py_INCREF(answer);
    else if (!PyErr_Occurred() && (answer = plain_answer(ctx, p, base, ret)) != NULL)
        n_plain++;
    if (answer != NULL && PyDict_SetItem(memo, key, answer) < 0)
        Py_CLEAR(answer);
    return answer;
}

/* One open; 1 taken, 0 not taken (nothing changed), -1 error. */
static int take_open(PyObject *rec, const unsigned char *p, PyObject *state, PyObject *fds,
                     PyObject *fd_obj, int32_t fd, PyObject *thread, PyObject *memo, PyObject *older,
                     PyObject *ctx, PyObject *held, int tracking, long long order, uint64_t ts, int64_t ret,
                     long long *room)
{
    uint16_t dlen = u16_at(p + 18);
    PyObject *base = open_base(state, fds, fd_obj, fd, p + HEADER_SIZE, dlen);
    if (base == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *rest = PyBytes_FromStringAndSize((const char *)p + 16, PyBytes_GET_SIZE(rec) - 16);
    if (rest == NULL) {
        Py_DECREF(base);
        return -1;
    }
    PyObject *key = PyTuple_Pack(2, base, rest);
    Py_DECREF(rest);
    if (key == NULL) {
        Py_DECREF(base);
        return -1;
    }
    PyObject *hit = tracking ? NULL : answer_for(key, memo, older, ctx, p, base, ret);
    Py_DECREF(key);
    Py_DECREF(base);
    if (hit == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int status = 0;
    if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 4)
        goto out;
    PyObject *fd_entry = PyTuple_GET_ITEM(hit, 0), *shape = PyTuple_GET_ITEM(hit, 1);
    int inert = PyObject_IsTrue(PyTuple_GET_ITEM(hit, 3));
    int dropped = PyObject_IsTrue(PyTuple_GET_ITEM(hit, 2));
    if (inert < 0 || dropped < 0) {
        status = -1;
        goto out;
    }
    if (!inert)
        goto out;
    PyObject *run = NULL;
    if (!dropped) {
        run = PyDict_GetItemWithError(held, thread);
        if (run == NULL) {
            status = PyErr_Occurred() ? -1 : 0;
            goto out;
        }
        if (!PyTuple_Check(run) || PyTuple_GET_SIZE(run) != 2 || !PyList_Check(PyTuple_GET_ITEM(run, 0))
            || !PyList_Check(PyTuple_GET_ITEM(run, 1)))
            goto out;
    }
    if (fd_entry != Py_None) {
        PyObject *ret_obj = PyLong_FromLongLong(ret);
        if (ret_obj == NULL || PyDict_SetItem(fds, ret_obj, fd_entry) < 0) {
            Py_XDECREF(ret_obj);
            status = -1;
            goto out;
        }
        Py_DECREF(ret_obj);
    }
    if (run != NULL) {
        PyObject *pairs = PyTuple_GET_ITEM(run, 1);
        PyObject *order_obj = PyLong_FromLongLong(order), *ts_obj = PyLong_FromUnsignedLongLong(ts);
        if (order_obj == NULL || ts_obj == NULL || PyList_Append(PyTuple_GET_ITEM(run, 0), shape) < 0
            || PyList_Append(pairs, order_obj) < 0 || PyList_Append(pairs, ts_obj) < 0) {
            Py_XDECREF(order_obj);
            Py_XDECREF(ts_obj);
            status = -1;
            goto out;
        }
        Py_DECREF(order_obj);
        Py_DECREF(ts_obj);
        *room -= 1;
    }
    status = 1;
out:
    Py_DECREF(hit);
    return status;
}

/* The last task looked up: its thread, its process's state and fd table (strong references). */
struct task {
    uint32_t tid;
    PyObject *thread, *state, *fds;
};

static void forget(struct task *t)
{
    Py_CLEAR(t->thread);
    Py_CLEAR(t->state);
    Py_CLEAR(t->fds);
}

/* Fill `t` for `tid`; t->thread stays NULL when the task is unknown, its process has no state
 * yet or its fd table is not a dict (Python takes the record). -1 on error. */
static int lookup(struct task *t, PyObject *tasks, PyObject *states, uint32_t tid)
{
    PyObject *key = PyLong_FromUnsignedLong(tid);
    if (key == NULL)
        return -1;
    PyObject *thread = PyDict_GetItemWithError(tasks, key);
    Py_DECREF(key);
    if (thread == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *process = PyObject_GetAttr(thread, s_process);
    if (process == NULL)
        return -1;
    PyObject *state = PyDict_GetItemWithError(states, process);
    Py_DECREF(process);
    if (state == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *fds = PyObject_GetAttr(state, s_fds);
    if (fds == NULL)
        return -1;
    if (!PyDict_Check(fds)) {
        Py_DECREF(fds);
        return 0;
    }
    Py_INCREF(thread);
    Py_INCREF(state);
    t->tid = tid;
    t->thread = thread;
    t->state = state;
    t->fds = fds;
    return 0;
}

static PyObject *fast_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "fast_records takes 11 arguments");
        return NULL;
    }
    PyObject *batch = args[0], *tasks = args[2], *states = args[3], *memo = args[4], *older = args[5],
             *held = args[6], *tracked = args[7], *ctx = args[10];
    if (!PyList_Check(batch) || !PyDict_Check(tasks) || !PyDict_Check(states) || !PyDict_Check(memo)
        || !PyDict_Check(older) || !PyDict_Check(held) || !PyDict_Check(tracked)) {
        PyErr_SetString(PyExc_TypeError, "fast_records: a list, an index, then six dicts");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    long long order = PyLong_AsLongLong(args[8]), room = PyLong_AsLongLong(args[9]);
    if (PyErr_Occurred())
        return NULL;
    int tracking = PyDict_GET_SIZE(tracked) > 0;
    struct task cache = {0, NULL, NULL, NULL};
    while (i >= 0 && i < PyList_GET_SIZE(batch)) {
        PyObject *rec = PyList_GET_ITEM(batch, i);
        if (!PyBytes_Check(rec) || PyBytes_GET_SIZE(rec) < HEADER_SIZE)
            break;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(rec);
        uint16_t hook = u16_at(p + 16), dlen = u16_at(p + 18);
        if ((hook != HOOK_OPEN && hook != HOOK_CLOSE) || PyBytes_GET_SIZE(rec) < HEADER_SIZE + dlen)
            break;
        uint32_t tid = u32_at(p + 12);
        if (!cache.thread || tid != cache.tid) {
            /* a thread's state and fd table do not change identity while this call runs (only
             * Python code reassigns them), so consecutive records of one task look them up once */
            forget(&cache);
            if (lookup(&cache, tasks, states, tid) < 0)
                goto failed;
            if (!cache.thread)
                break;
        }
        Py_INCREF(rec);
        int taken = -1;
        PyObject *fd_obj = PyLong_FromLong((int32_t)(uint32_t)u64_at(p + 32));
        if (fd_obj != NULL) {
            if (hook == HOOK_CLOSE) {
                int has = PyDict_Contains(cache.fds, fd_obj);
                taken = has < 0 ? -1 : (has && PyDict_DelItem(cache.fds, fd_obj) < 0) ? -1 : 1;
            } else {
                taken = take_open(rec, p, cache.state, cache.fds, fd_obj, (int32_t)(uint32_t)u64_at(p + 32),
                                  cache.thread, memo, older, ctx, held, tracking, order, u64_at(p),
                                  (int64_t)u64_at(p + 24), &room);
            }
            Py_DECREF(fd_obj);
        }
        Py_DECREF(rec);
        if (taken < 0)
            goto failed;
        if (taken == 0)
            break;
        n_taken++;
        order += 1;
        i += 1;
        if (room <= 0)
            break;
    }
    forget(&cache);
    return Py_BuildValue("(nLL)", i, order, room);
failed:
    forget(&cache);
    return NULL;
}

/* Write `v` in decimal at `w` (at most 20 digits, no terminator); the digits written. What
 * "%llu" gives, without snprintf's cost per line. */
static Py_ssize_t put_u64(char *w, uint64_t v)
{
    char digits[20];
    Py_ssize_t n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (Py_ssize_t k = 0; k < n; k++)
        w[k] = digits[n - 1 - k];
    return n;
}

/* join_lines(head, seq, pid_part, tails) -> bytes: for each tail, head + decimal seq (counting up
 * from `seq`) + pid_part + tail, as normalizer/kernel_lines.py join_lines (its fallback) gives. */
static PyObject *join_lines(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[2]) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "join_lines(head: bytes, seq: int, pid_part: bytes, tails: list[bytes])");
        return NULL;
    }
    long long seq = PyLong_AsLongLong(args[1]);
    if (seq == -1 && PyErr_Occurred())
        return NULL;
    if (seq < 0) {
        PyErr_SetString(PyExc_ValueError, "join_lines: seq must not be negative");
        return NULL;
    }
    PyObject *tails = args[3];
    Py_ssize_t n = PyList_GET_SIZE(tails), head_n = PyBytes_GET_SIZE(args[0]), pid_n = PyBytes_GET_SIZE(args[2]);
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *tail = PyList_GET_ITEM(tails, k);
        if (!PyBytes_Check(tail)) {
            PyErr_SetString(PyExc_TypeError, "join_lines: tails must be bytes");
            return NULL;
        }
        total += head_n + 20 + pid_n + PyBytes_GET_SIZE(tail); /* 20: the most digits of a u64 */
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *w = PyBytes_AS_STRING(out);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *tail = PyList_GET_ITEM(tails, k);
        memcpy(w, PyBytes_AS_STRING(args[0]), (size_t)head_n);
        w += head_n;
        w += put_u64(w, (uint64_t)(seq + k));
        memcpy(w, PyBytes_AS_STRING(args[2]), (size_t)pid_n);
        w += pid_n;
        memcpy(w, PyBytes_AS_STRING(tail), (size_t)PyBytes_GET_SIZE(tail));
        w += PyBytes_GET_SIZE(tail);
    }
    if (_PyBytes_Resize(&out, w - PyBytes_AS_STRING(out)) < 0)
        return NULL;
    return out;
}

/* join_indexed(head, seq, pid_part, tails, spans, indexes, start, count) -> bytes: join_lines of
 * the tails that indexes[start:start + count] pick, tail i being tails[spans[2i]:spans[2i + 1]]
 * (spans and indexes: native u64s), as normalizer/kernel_lines.py join_indexed (its fallback)
 * gives. Every index and span is checked against the buffers before anything is copied. */
static PyObject *join_indexed(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 8 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[2]) || !PyBytes_Check(args[3])
        || !PyBytes_Check(args[4]) || !PyBytes_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "join_indexed(head: bytes, seq: int, pid_part: bytes, tails: bytes, "
                                         "spans: bytes, indexes: bytes, start: int, count: int)");
        return NULL;
    }
    long long seq = PyLong_AsLongLong(args[1]);
    Py_ssize_t start = PyLong_AsSsize_t(args[6]), count = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred())
        return NULL;
    const char *head = PyBytes_AS_STRING(args[0]), *pid = PyBytes_AS_STRING(args[2]),
               *tails = PyBytes_AS_STRING(args[3]);
    Py_ssize_t head_n = PyBytes_GET_SIZE(args[0]), pid_n = PyBytes_GET_SIZE(args[2]),
               tails_n = PyBytes_GET_SIZE(args[3]);
    Py_ssize_t shapes_n = PyBytes_GET_SIZE(args[4]) / 16, picks_n = PyBytes_GET_SIZE(args[5]) / 8;
    const unsigned char *spans = (const unsigned char *)PyBytes_AS_STRING(args[4]),
                        *picks = (const unsigned char *)PyBytes_AS_STRING(args[5]);
    if (seq < 0 || start < 0 || count < 0 || PyBytes_GET_SIZE(args[4]) % 16 || PyBytes_GET_SIZE(args[5]) % 8
        || start > picks_n || count > picks_n - start) {
        PyErr_SetString(PyExc_ValueError, "join_indexed: seq, start or count out of range, or not u64 arrays");
        return NULL;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t k = start; k < start + count; k++) {
        uint64_t i = u64_at(picks + 8 * k);
        if (i >= (uint64_t)shapes_n || u64_at(spans + 16 * i) > u64_at(spans + 16 * i + 8)
            || u64_at(spans + 16 * i + 8) > (uint64_t)tails_n) {
            PyErr_SetString(PyExc_ValueError, "join_indexed: an index or span is out of bounds");
            return NULL;
        }
        total += head_n + 20 + pid_n + (Py_ssize_t)(u64_at(spans + 16 * i + 8) - u64_at(spans + 16 * i));
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *w = PyBytes_AS_STRING(out);
    for (Py_ssize_t k = start; k < start + count; k++) {
        uint64_t i = u64_at(picks + 8 * k), from = u64_at(spans + 16 * i), to = u64_at(spans + 16 * i + 8);
        memcpy(w, head, (size_t)head_n);
        w += head_n;
        w += put_u64(w, (uint64_t)(seq + (k - start)));
        memcpy(w, pid, (size_t)pid_n);
        w += pid_n;
        memcpy(w, tails + from, (size_t)(to - from));
        w += to - from;
    }
    if (_PyBytes_Resize(&out, w - PyBytes_AS_STRING(out)) < 0)
        return NULL;
    return out;
}

/* index_shapes(shapes) -> (table, indexes): the distinct objects of `shapes` by identity, in
 * first-seen order, and each item's position in that table as native u64s, as
 * normalizer/buckets.py index_shapes (its fallback) gives. */
static PyObject *index_shapes(PyObject *self, PyObject *shapes)
{
    (void)self;
    if (!PyList_Check(shapes)) {
        PyErr_SetString(PyExc_TypeError, "index_shapes takes a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(shapes);
    PyObject *seen = PyDict_New(), *table = PyList_New(0);
    PyObject *indexes = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint64_t));
    if (seen == NULL || table == NULL || indexes == NULL)
        goto failed;
    uint64_t *out = (uint64_t *)PyBytes_AS_STRING(indexes);
    for (Py_ssize_t k = 0; k < n && k < PyList_GET_SIZE(shapes); k++) {
        PyObject *item = PyList_GET_ITEM(shapes, k);
        PyObject *key = PyLong_FromVoidPtr(item);
        if (key == NULL)
            goto failed;
        PyObject *at = PyDict_GetItemWithError(seen, key);
        if (at == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(key);
                goto failed;
            }
            at = PyLong_FromSsize_t(PyList_GET_SIZE(table));
            if (at == NULL || PyDict_SetItem(seen, key, at) < 0 || PyList_Append(table, item) < 0) {
                Py_XDECREF(at);
                Py_DECREF(key);
                goto failed;
            }
            Py_DECREF(at); /* the dict holds it */
        }
        Py_DECREF(key);
        out[k] = (uint64_t)PyLong_AsSsize_t(at);
    }
    Py_DECREF(seen);
    return Py_BuildValue("(NN)", table, indexes);
failed:
    Py_XDECREF(seen);
    Py_XDECREF(table);
    Py_XDECREF(indexes);
    return NULL;
}

/* unseen_shapes(shapes, by_id) -> the distinct objects of `shapes` whose id() is not a key of
 * `by_id`, in first-seen order (normalizer/collector.py unseen_shapes is the fallback). */
static PyObject *unseen_shapes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyList_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "unseen_shapes(shapes: list, by_id: dict)");
        return NULL;
    }
    PyObject *shapes = args[0], *by_id = args[1];
    PyObject *seen = PySet_New(NULL), *out = PyList_New(0);
    if (seen == NULL || out == NULL)
        goto failed;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(shapes); k++) {
        PyObject *item = PyList_GET_ITEM(shapes, k);
        PyObject *key = PyLong_FromVoidPtr(item);
        if (key == NULL)
            goto failed;
        int known = PyDict_Contains(by_id, key);
        if (known == 0)
            known = PySet_Contains(seen, key);
        if (known == 0 && (PySet_Add(seen, key) < 0 || PyList_Append(out, item) < 0))
            known = -1;
        Py_DECREF(key);
        if (known < 0)
            goto failed;
    }
    Py_DECREF(seen);
    return out;
failed:
    Py_XDECREF(seen);
    Py_XDECREF(out);
    return NULL;
}

/* tails_of(shapes, by_id) -> [by_id[id(s)] for s in shapes] (KeyError when one is missing). */
static PyObject *tails_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyList_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "tails_of(shapes: list, by_id: dict)");
        return NULL;
    }
    PyObject *shapes = args[0], *by_id = args[1];
    Py_ssize_t n = PyList_GET_SIZE(shapes);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *key = PyLong_FromVoidPtr(PyList_GET_ITEM(shapes, k));
        if (key == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *tail = PyDict_GetItemWithError(by_id, key);
        if (tail == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, key);
            Py_DECREF(key);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(key);
        Py_INCREF(tail);
        PyList_SET_ITEM(out, k, tail);
    }
    return out;
}

/* The attribute names stage B's functions read, interned on first use. -1 on error. */
static PyObject *s_event_type, *s_kind, *s_meta, *s_status, *s_flags, *s_access_mode;

static int shape_names(void)
{
    if (s_access_mode != NULL)
        return 0;
    s_event_type = PyUnicode_InternFromString("event_type");
    s_kind = PyUnicode_InternFromString("kind");
    s_meta = PyUnicode_InternFromString("meta");
    s_status = PyUnicode_InternFromString("status");
    s_flags = PyUnicode_InternFromString("flags");
    s_access_mode = s_event_type && s_kind && s_meta && s_status && s_flags
                        ? PyUnicode_InternFromString("access_mode") : NULL;
    return s_access_mode != NULL ? 0 : -1;
}

/* Is `v` a str msgspec writes as its own characters between quotes (printable ASCII, no quote
 * or backslash)? Its UTF-8 is then its bytes. */
static int plain_json(PyObject *v, const char **s, Py_ssize_t *n)
{
    if (!PyUnicode_Check(v) || !PyUnicode_IS_ASCII(v))
        return 0;
    const char *p = (const char *)PyUnicode_DATA(v);
    Py_ssize_t len = PyUnicode_GET_LENGTH(v);
    for (Py_ssize_t k = 0; k < len; k++)
        if (p[k] < 0x20 || p[k] == 0x7f || p[k] == '"' || p[k] == '\\')
            return 0;
    *s = p;
    *n = len;
    return 1;
}

/* The frame (before, after) of a shape's (event_type, kind, meta) (new references in *before and
 * *after): `frames` by key, else frame_of(shape). -1 on error. */
static int frame_for(PyObject *frames, PyObject *frame_of, PyObject *shape, PyObject *key,
                     PyObject **before, PyObject **after)
{
    PyObject *frame = PyDict_GetItemWithError(frames, key);
    if (frame != NULL)
        Py_INCREF(frame);
    else if (!PyErr_Occurred())
        frame = PyObject_CallOneArg(frame_of, shape);
    if (frame == NULL)
        return -1;
    if (!PyTuple_Check(frame) || PyTuple_GET_SIZE(frame) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(frame, 0))
        || !PyBytes_Check(PyTuple_GET_ITEM(frame, 1)) || PyBytes_GET_SIZE(PyTuple_GET_ITEM(frame, 1)) < 4) {
        Py_DECREF(frame);
        PyErr_SetString(PyExc_TypeError, "shape_tails: a frame is (before: bytes, after: bytes from null)");
        return -1;
    }
    *before = Py_NewRef(PyTuple_GET_ITEM(frame, 0));
    *after = Py_NewRef(PyTuple_GET_ITEM(frame, 1));
    Py_DECREF(frame);
    return 0;
}

/* Is `x` the object `y`, or equal to it? -1 on error. */
static int same(PyObject *x, PyObject *y)
{
    if (x == y)
        return 1;
    if (y == NULL || Py_TYPE(x) != Py_TYPE(y))
        return 0;
    return PyObject_RichCompareBool(x, y, Py_EQ);
}

/* shape_tails(shapes, values, frames, frame_of, encode) -> [tail per shape], as
 * normalizer/kernel_lines.py KernelLines.tails (its fallback) gives: the frame of the shape's
 * (event_type, kind, meta), from `frames` or `frame_of(shape)`, with the value encoded (`encode`,
 * unless msgspec would write its characters as they are) spliced in for its `null`. Consecutive
 * shapes of one key (equal) share the lookup. */
static PyObject *shape_tails(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || !PyDict_Check(args[2])
        || PyList_GET_SIZE(args[0]) != PyList_GET_SIZE(args[1])) {
        PyErr_SetString(PyExc_TypeError, "shape_tails(shapes: list, values: list (as long), frames: dict, "
                                         "frame_of, encode)");
        return NULL;
    }
    PyObject *shapes = args[0], *values = args[1], *frames = args[2], *frame_of = args[3], *encode = args[4];
    if (shape_names() < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(shapes);
    PyObject *out = PyList_New(n);
    PyObject *key = NULL, *before = NULL, *after = NULL; /* the last frame looked up, and its key */
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *shape = PyList_GET_ITEM(shapes, k), *value = PyList_GET_ITEM(values, k);
        PyObject *t = PyObject_GetAttr(shape, s_event_type), *kind = PyObject_GetAttr(shape, s_kind),
                 *meta = PyObject_GetAttr(shape, s_meta);
        PyObject *now = t && kind && meta ? PyTuple_Pack(3, t, kind, meta) : NULL;
        Py_XDECREF(t);
        Py_XDECREF(kind);
        Py_XDECREF(meta);
        if (now == NULL)
            goto failed;
        int hit = 1;
        for (int f = 0; f < 3 && hit > 0; f++)
            hit = same(PyTuple_GET_ITEM(now, f), key ? PyTuple_GET_ITEM(key, f) : NULL);
        if (hit < 0) {
            Py_DECREF(now);
            goto failed;
        }
        if (hit == 0) {
            Py_CLEAR(before);
            Py_CLEAR(after);
            Py_XSETREF(key, now);
            if (frame_for(frames, frame_of, shape, key, &before, &after) < 0)
                goto failed;
        } else {
            Py_DECREF(now);
        }
        const char *a = PyBytes_AS_STRING(after) + 4, *b = PyBytes_AS_STRING(before), *v = NULL;
        Py_ssize_t an = PyBytes_GET_SIZE(after) - 4, bn = PyBytes_GET_SIZE(before), vn = 0;
        PyObject *encoded = NULL;
        if (value == Py_None) {
            a -= 4;
            an += 4;
        } else if (!plain_json(value, &v, &vn)) {
            encoded = PyObject_CallOneArg(encode, value);
            if (encoded == NULL)
                goto failed;
            if (!PyBytes_Check(encoded)) {
                Py_DECREF(encoded);
                PyErr_SetString(PyExc_TypeError, "shape_tails: encode must give bytes");
                goto failed;
            }
            v = PyBytes_AS_STRING(encoded);
            vn = PyBytes_GET_SIZE(encoded);
        }
        Py_ssize_t quotes = value != Py_None && encoded == NULL ? 2 : 0;
        PyObject *tail = PyBytes_FromStringAndSize(NULL, bn + quotes + vn + an);
        if (tail != NULL) {
            char *w = PyBytes_AS_STRING(tail);
            memcpy(w, b, (size_t)bn);
            w += bn;
            if (quotes)
                *w++ = '"';
            if (vn)
                memcpy(w, v, (size_t)vn);
            w += vn;
            if (quotes)
                *w++ = '"';
            memcpy(w, a, (size_t)an);
        }
        Py_XDECREF(encoded);
        if (tail == NULL)
            goto failed;
        PyList_SET_ITEM(out, k, tail);
    }
    Py_XDECREF(key);
    Py_XDECREF(before);
    Py_XDECREF(after);
    return out;
failed:
    Py_XDECREF(key);
    Py_XDECREF(before);
    Py_XDECREF(after);
    Py_DECREF(out);
    return NULL;
}

/* Add `value` to `into` unless `into` is None; -1 on error. */
static int add_to(PyObject *into, PyObject *value)
{
    return into == Py_None ? 0 : PySet_Add(into, value);
}

#define O_TMPFILE_BIT 020000000L /* normalizer/classify.py O_TMPFILE_BIT */

/* Does `meta` describe a successful open for writing (status None, access mode in `writes`, not an
 * O_TMPFILE open, which names the directory of an unnamed file)? */
static int opened_for_writing(PyObject *meta, PyObject *writes)
{
    if (meta == Py_None)
        return 0;
    PyObject *status = PyObject_GetAttr(meta, s_status);
    if (status == NULL)
        return -1;
    int ok = status == Py_None;
    Py_DECREF(status);
    if (!ok)
        return 0;
    PyObject *flags = PyObject_GetAttr(meta, s_flags);
    if (flags == NULL)
        return -1;
    long bits = PyLong_Check(flags) ? PyLong_AsLong(flags) : 0;
    Py_DECREF(flags);
    if (bits == -1 && PyErr_Occurred())
        return -1;
    if (bits & O_TMPFILE_BIT)
        return 0;
    PyObject *mode = PyObject_GetAttr(meta, s_access_mode);
    if (mode == NULL)
        return -1;
    ok = PySequence_Contains(writes, mode);
    Py_DECREF(mode);
    return ok;
}

/* collect_values(shapes, values, kinds, routes, writes) -> None, as normalizer/collector.py
 * collect_values (its fallback): every shape's kind into `kinds`; a value (not None) into the sets
 * of its kind's route (into, blocked, written: each a set or None), into `written` only when the
 * shape's meta is a successful open with an access mode in `writes`. */
static PyObject *collect_values(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || !PySet_Check(args[2])
        || !PyDict_Check(args[3]) || PyList_GET_SIZE(args[0]) != PyList_GET_SIZE(args[1])) {
        PyErr_SetString(PyExc_TypeError, "collect_values(shapes: list, values: list (as long), kinds: set, "
                                         "routes: dict, writes)");
        return NULL;
    }
    PyObject *shapes = args[0], *values = args[1], *kinds = args[2], *routes = args[3], *writes = args[4];
    if (shape_names() < 0)
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(shapes); k++) {
        PyObject *shape = PyList_GET_ITEM(shapes, k), *value = PyList_GET_ITEM(values, k);
        PyObject *kind = PyObject_GetAttr(shape, s_kind);
        if (kind == NULL || PySet_Add(kinds, kind) < 0) {
            Py_XDECREF(kind);
            return NULL;
        }
        PyObject *route = value == Py_None ? NULL : PyDict_GetItemWithError(routes, kind);
        Py_DECREF(kind);
        if (route == NULL) {
            if (PyErr_Occurred())
                return NULL;
            continue;
        }
        if (!PyTuple_Check(route) || PyTuple_GET_SIZE(route) != 3) {
            PyErr_SetString(PyExc_TypeError, "collect_values: a route is (into, blocked, written)");
            return NULL;
        }
        PyObject *written = PyTuple_GET_ITEM(route, 2);
        if (add_to(PyTuple_GET_ITEM(route, 0), value) < 0 || add_to(PyTuple_GET_ITEM(route, 1), value) < 0)
            return NULL;
        if (written != Py_None) {
            PyObject *meta = PyObject_GetAttr(shape, s_meta);
            int yes = meta == NULL ? -1 : opened_for_writing(meta, writes);
            Py_XDECREF(meta);
            if (yes < 0 || (yes && PySet_Add(written, value) < 0))
                return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *any_folded(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* counters() -> (records fast_records took, plain opens it worked out), since the module loaded. */
static PyObject *counters(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("(KK)", n_taken, n_plain);
}

static PyMethodDef methods[] = {
    {"counters", counters, METH_NOARGS, "(records fast_records took, plain opens it worked out)"},
    {"join_indexed", (PyCFunction)(void (*)(void))join_indexed, METH_FASTCALL,
     "Kernel lines of tails picked by index (normalizer/kernel_lines.py join_indexed, in C)."},
    {"shape_tails", (PyCFunction)(void (*)(void))shape_tails, METH_FASTCALL,
     "Each shape's kernel-line tail (normalizer/kernel_lines.py KernelLines.tails, in C)."},
    {"collect_values", (PyCFunction)(void (*)(void))collect_values, METH_FASTCALL,
     "Kinds and values gathered for the surface (normalizer/collector.py collect_values, in C)."},
    {"unseen_shapes", (PyCFunction)(void (*)(void))unseen_shapes, METH_FASTCALL,
     "Distinct shapes not yet in the tail memo (normalizer/collector.py unseen_shapes, in C)."},
    {"tails_of", (PyCFunction)(void (*)(void))tails_of, METH_FASTCALL,
     "Each shape's tail from the memo by id (normalizer/collector.py tails_of, in C)."},
    {"index_shapes", index_shapes, METH_O,
     "Distinct shapes and each item's index (normalizer/buckets.py index_shapes, in C)."},
    {"join_lines", (PyCFunction)(void (*)(void))join_lines, METH_FASTCALL,
     "Kernel lines spliced in one block (normalizer/kernel_lines.py join_lines, in C)."},
    {"fast_records", (PyCFunction)(void (*)(void))fast_records, METH_FASTCALL,
     "The scan's fast path (normalizer/scan.py fast_records, in C)."},
    {"any_folded", (PyCFunction)(void (*)(void))any_folded, METH_FASTCALL, /* defined at the end */
     "Whether a block, ASCII lower-cased, holds any needle (normalizer/redact.py any_folded, in C)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastscan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastscan(void)
{
    s_process = PyUnicode_InternFromString("process");
    s_fds = PyUnicode_InternFromString("fds");
    s_cwd = PyUnicode_InternFromString("cwd");
    if (s_process == NULL || s_fds == NULL || s_cwd == NULL)
        return NULL;
    return PyModule_Create(&module);
}

/* ==== any_folded: the secret sweep's block prefilter (pubpipe; normalizer/redact.py any_folded) ====
 *
 * any_folded(block, needles) -> bool: does `block` (any buffer), with ASCII A-Z read as a-z, hold
 * one of `needles` (a tuple of bytes, given lower-cased)? The same answer as normalizer/redact.py
 * any_folded, its fallback and reference: `any(n in bytes(block).lower() for n in needles)`.
 *
 * One pass over the block whatever the number of needles. Three 256-entry tables give, per raw
 * byte, the needles whose first (second, third) byte it lower-cases to (every needle shorter than
 * that position is in the second and third tables whatever the byte): the needles that can start
 * at a position are the AND of its three bytes' entries, almost always none, and only those are
 * compared in full. Positions are tested sixteen at a time, with one branch for the sixteen. The block
 * is held as a Py_buffer and scanned with the GIL released, so the kernel layer's sweep runs
 * beside stage B (normalizer/kernel_lines.py). */
#define FOLD_NEEDLES_MAX 64

struct folded {
    const unsigned char *need[FOLD_NEEDLES_MAX];
    Py_ssize_t need_n[FOLD_NEEDLES_MAX];
    uint64_t at[3][256]; /* at[j][c]: the needles whose byte j byte c lower-cases to, or shorter than j + 1 */
    uint64_t shorter[3];  /* shorter[j]: the needles of at most j bytes */
    unsigned char low[256];
};

/* Does a needle start at b[p] (of n bytes)? Only the candidates of the tables are compared. */
static int folded_at(const struct folded *f, const unsigned char *b, Py_ssize_t n, Py_ssize_t p)
{
    uint64_t cand = f->at[0][b[p]];
    for (int j = 1; j < 3 && cand; j++)
        cand &= p + j < n ? f->at[j][b[p + j]] : f->shorter[j];
    while (cand) {
        int k = __builtin_ctzll(cand);
        cand &= cand - 1;
        Py_ssize_t m = f->need_n[k], j = 1;
        if (m > n - p)
            continue;
        while (j < m && f->low[b[p + j]] == f->need[k][j])
            j++;
        if (j == m)
            return 1;
    }
    return 0;
}

static PyObject *any_folded(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "any_folded(block: buffer, needles: tuple[bytes, ...])");
        return NULL;
    }
    PyObject *needles = args[1];
    Py_ssize_t count = PyTuple_GET_SIZE(needles);
    if (count > FOLD_NEEDLES_MAX) {
        PyErr_SetString(PyExc_ValueError, "any_folded: too many needles");
        return NULL;
    }
    struct folded f;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *n = PyTuple_GET_ITEM(needles, k);
        if (!PyBytes_Check(n)) {
            PyErr_SetString(PyExc_TypeError, "any_folded: needles must be bytes");
            return NULL;
        }
        f.need[k] = (const unsigned char *)PyBytes_AS_STRING(n);
        f.need_n[k] = PyBytes_GET_SIZE(n);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len;
    int found = 0;
    Py_BEGIN_ALLOW_THREADS
    memset(f.at, 0, sizeof f.at);
    memset(f.shorter, 0, sizeof f.shorter);
    for (int c = 0; c < 256; c++)
        f.low[c] = (unsigned char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    for (Py_ssize_t k = 0; k < count; k++) {
        uint64_t bit = (uint64_t)1 << k;
        if (f.need_n[k] == 0) {
            found = 1; /* the empty needle is in every block */
            continue;
        }
        for (int j = 0; j < 3; j++) {
            if (f.need_n[k] <= j) {
                f.shorter[j] |= bit;
                for (int c = 0; c < 256; c++)
                    f.at[j][c] |= bit;
                continue;
            }
            for (int c = 0; c < 256; c++)
                if (f.low[c] == f.need[k][j])
                    f.at[j][c] |= bit;
        }
    }
    Py_ssize_t p = 0;
    for (; !found && p + 18 <= n; p += 16) { /* positions p..p+15 read bytes up to p+17 */
        uint64_t any = 0;
        for (int u = 0; u < 16; u++)
            any |= f.at[0][b[p + u]] & f.at[1][b[p + u + 1]] & f.at[2][b[p + u + 2]];
        if (any)
            for (int u = 0; u < 16 && !found; u++)
                found = folded_at(&f, b, n, p + u);
    }
    for (; !found && p < n; p++)
        found = folded_at(&f, b, n, p);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBool_FromLong(found);
}
/* ==== end of any_folded ==== */
