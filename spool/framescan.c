/* spool/framescan.c: the spool reader's walk over whole frames in C (module spool._framescan).
 *
 * A spool is length-prefixed frames (u32 little-endian, then the msgpack body). Both functions
 * walk the whole frames of block[pos:end] (any buffer: the reader's), and stop (returning the
 * offset reached) at the first frame they do not take: one cut by the block's end, one announcing
 * more than MAX_FRAME, one that is not what they look for. Python's frame reader takes that one
 * its general way (which reads on, or refuses a torn or foreign frame).
 *
 * skip_frames(block, pos, end, head) -> pos: steps over the frames whose body starts with `head`
 * (read_spool: batch frames are recognized by their first bytes, not decoded).
 *
 * batch_records(block, pos, end, out, limit, head) -> pos: appends to list `out` the records of each
 * batch frame, while `out` holds fewer than `limit`. A batch frame here is `head` (msgpack of a
 * Batch up to its records array: spool/format.py _BATCH_HEAD) then exactly one msgpack array of
 * `bin` items ending with the frame; each item becomes a bytes object. A frame is checked whole
 * before any of its records is appended.
 *
 * spool/format.py batch_records and skip_frames are their pure-Python fallbacks and references
 * (spool/accel.py; tests/test_spool_reader.py). Built by scripts/build_native.sh (`make setup`)
 * with the machine's gcc.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the spool's frame prefix is little-endian; this reader reads it natively"
#endif

#define MAX_FRAME ((Py_ssize_t)256 << 20)

/* Batch frames batch_records read since the module loaded (`counters()`): equal output proves the
 * walk agrees with Python when it acts; this shows it acts (tests/test_spool_reader.py). */
static unsigned long long n_frames;

static uint32_t u32_at(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }


static uint32_t be_at(const unsigned char *p, int n)
{
    uint32_t v = 0;
    for (int k = 0; k < n; k++)
        v = v << 8 | p[k];
    return v;
}

/* The body size of a whole frame at b[pos] (of n bytes), or -1. */
static Py_ssize_t whole_frame(const unsigned char *b, Py_ssize_t n, Py_ssize_t pos)
{
    if (n - pos < 4)
        return -1;
    Py_ssize_t size = (Py_ssize_t)u32_at(b + pos);
    return size <= MAX_FRAME && size <= n - pos - 4 ? size : -1;
}

/* Parse the `fn` bytes at f as exactly one msgpack array of bin items; the item count, or -1 when
 * they are not that. With `out`, each item is appended to it (-2: no memory); the caller parses
 * once without `out` first, so a frame is never taken in part. */
static Py_ssize_t bin_array(const unsigned char *f, Py_ssize_t fn, PyObject *out)
{
    if (fn < 1)
        return -1;
    Py_ssize_t count, at;
    if ((f[0] & 0xf0) == 0x90) {
        count = f[0] & 0x0f;
        at = 1;
    } else if (f[0] == 0xdc && fn >= 3) {
        count = be_at(f + 1, 2);
        at = 3;
    } else if (f[0] == 0xdd && fn >= 5) {
        count = be_at(f + 1, 4);
        at = 5;
    } else {
        return -1;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        int width = at < fn ? (f[at] == 0xc4 ? 1 : f[at] == 0xc5 ? 2 : f[at] == 0xc6 ? 4 : 0) : 0;
        if (width == 0 || fn - at - 1 < width)
            return -1;
        Py_ssize_t len = be_at(f + at + 1, width);
        at += 1 + width;
        if (len > fn - at)
            return -1;
        if (out != NULL) {
            PyObject *rec = PyBytes_FromStringAndSize((const char *)f + at, len);
            if (rec == NULL)
                return -2;
            int failed = PyList_Append(out, rec);
            Py_DECREF(rec);
            if (failed)
                return -2;
        }
        at += len;
    }
    return at == fn ? count : -1;
}

/* The block (a buffer held in `view`) and the offsets pos <= end within it; 0, or -1 with an
 * exception. */
static int frames_view(PyObject *block, PyObject *pos_obj, PyObject *end_obj, Py_buffer *view,
                       Py_ssize_t *pos, Py_ssize_t *end)
{
    *pos = PyLong_AsSsize_t(pos_obj);
    *end = PyLong_AsSsize_t(end_obj);
    if ((*pos == -1 || *end == -1) && PyErr_Occurred())
        return -1;
    if (PyObject_GetBuffer(block, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (*pos < 0 || *pos > *end || *end > view->len) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "spool frames: pos and end must be offsets within the block");
        return -1;
    }
    return 0;
}

static PyObject *batch_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6 || !PyList_Check(args[3]) || !PyBytes_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "batch_records(block: buffer, pos: int, end: int, out: list, limit: int, head: bytes)");
        return NULL;
    }
    Py_buffer view;
    Py_ssize_t pos, end, limit = PyLong_AsSsize_t(args[4]);
    if ((limit == -1 && PyErr_Occurred()) || frames_view(args[0], args[1], args[2], &view, &pos, &end) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    const unsigned char *head = (const unsigned char *)PyBytes_AS_STRING(args[5]);
    Py_ssize_t hn = PyBytes_GET_SIZE(args[5]);
    PyObject *out = args[3];
    int failed = 0;
    while (PyList_GET_SIZE(out) < limit) {
        Py_ssize_t size = whole_frame(b, end, pos);
        if (size < hn || memcmp(b + pos + 4, head, (size_t)hn) != 0)
            break;
        const unsigned char *items = b + pos + 4 + hn;
        if (bin_array(items, size - hn, NULL) < 0)
            break;
        if (bin_array(items, size - hn, out) < 0) {
            failed = 1; /* no memory: the frame parsed above */
            break;
        }
        n_frames++;
        pos += 4 + size;
    }
    PyBuffer_Release(&view);
    return failed ? NULL : PyLong_FromSsize_t(pos);
}

static PyObject *skip_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4 || !PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "skip_frames(block: buffer, pos: int, end: int, head: bytes)");
        return NULL;
    }
    Py_buffer view;
    Py_ssize_t pos, end;
    if (frames_view(args[0], args[1], args[2], &view, &pos, &end) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    const unsigned char *head = (const unsigned char *)PyBytes_AS_STRING(args[3]);
    Py_ssize_t hn = PyBytes_GET_SIZE(args[3]);
    for (;;) {
        Py_ssize_t size = whole_frame(b, end, pos);
        if (size < hn || memcmp(b + pos + 4, head, (size_t)hn) != 0)
            break;
        pos += 4 + size;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos);
}

/* counters() -> (batch frames batch_records read,), since the module loaded. */
static PyObject *counters(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("(K)", n_frames);
}

static PyMethodDef methods[] = {
    {"counters", counters, METH_NOARGS, "(batch frames batch_records read,)"},
    {"batch_records", (PyCFunction)(void (*)(void))batch_records, METH_FASTCALL,
     "The records of a block's whole batch frames (spool/format.py batch_records, in C)."},
    {"skip_frames", (PyCFunction)(void (*)(void))skip_frames, METH_FASTCALL,
     "Steps over a block's whole frames that start with given bytes (spool/format.py skip_frames, in C)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_framescan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__framescan(void)
{
    return PyModule_Create(&module);
}
