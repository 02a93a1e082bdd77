/* The ring-buffer consumer in C: libbpf calls `assay_ring_cb` once per record
 * (registered through BCC as the ring's callback, ebpf/ringsink.py), and it
 * appends the record to its run's buffer, demultiplexed by the run key in the
 * record header (struct assay_hdr.run, offset 22). No Python runs per record:
 * after each drain Python takes every run's buffer in one call.
 *
 * A run's buffer holds its records already encoded for where they go:
 *   RINGSINK_MSGPACK: msgpack `bin` items, the body of a spool Batch's
 *                     `records` array (spool/format.py);
 *   RINGSINK_FRAMES:  u32 little-endian length + record, the daemon's run
 *                     channel framing (runner/capture/channel.py).
 * A record whose key has no open run is counted in `orphans`, never stored.
 *
 * Bounded memory: once the buffered bytes of all runs pass `pause_bytes`, the
 * callback keeps the record it was given (libbpf has already consumed it) and
 * returns -1, which makes libbpf stop the drain there; Python hands the
 * buffers on and drains again (`paused` says so). Built by `make setup`
 * (scripts/setup.sh) with gcc -O2 -shared -fPIC; no libbpf headers needed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RINGSINK_SLOTS 64      /* ebpf/wire.py RUN_SLOTS: key % RINGSINK_SLOTS */
#define RINGSINK_HDR 64        /* sizeof(struct assay_hdr) */
#define RINGSINK_RUN_OFFSET 22 /* offsetof(struct assay_hdr, run) */
#define RINGSINK_MSGPACK 0
#define RINGSINK_FRAMES 1

struct ringsink_run {
    uint32_t key;
    int32_t format;      /* -1: no run open in this slot */
    uint64_t records;    /* records in `data` now */
    uint64_t total;      /* records handed to this run since it was opened */
    uint64_t data_len;
    uint64_t data_cap;
    unsigned char *data;
};

struct ringsink {
    struct ringsink_run runs[RINGSINK_SLOTS];
    uint64_t orphans;     /* records of no open run, or shorter than a header */
    uint64_t buffered;    /* bytes in all runs' buffers */
    uint64_t pause_bytes; /* stop a drain once this much is buffered */
    int32_t paused;       /* the last drain stopped at pause_bytes */
    uint64_t lost;        /* records dropped because a buffer could not grow (out of memory) */
};

struct ringsink *ringsink_new(uint64_t pause_bytes)
{
    struct ringsink *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    for (int i = 0; i < RINGSINK_SLOTS; i++)
        s->runs[i].format = -1;
    s->pause_bytes = pause_bytes;
    return s;
}

void ringsink_free(struct ringsink *s)
{
    if (!s)
        return;
    for (int i = 0; i < RINGSINK_SLOTS; i++)
        free(s->runs[i].data);
    free(s);
}

/* Records of `key` go to its buffer in `format` from now on; -1 when the slot is taken. */
int ringsink_open_run(struct ringsink *s, uint32_t key, int32_t format)
{
    struct ringsink_run *r = &s->runs[key % RINGSINK_SLOTS];
    if (r->format >= 0 || (format != RINGSINK_MSGPACK && format != RINGSINK_FRAMES))
        return -1;
    r->key = key;
    r->format = format;
    r->records = r->total = r->data_len = 0;
    return 0;
}

/* Later records of `key` are orphans; whatever is still buffered is dropped (take it first). */
void ringsink_close_run(struct ringsink *s, uint32_t key)
{
    struct ringsink_run *r = &s->runs[key % RINGSINK_SLOTS];
    if (r->format < 0 || r->key != key)
        return;
    s->buffered -= r->data_len;
    r->format = -1;
    r->records = r->data_len = 0;
}

static int reserve(struct ringsink_run *r, uint64_t more)
{
    if (r->data_len + more <= r->data_cap)
        return 0;
    uint64_t cap = r->data_cap ? r->data_cap : 1 << 16;
    while (cap < r->data_len + more)
        cap *= 2;
    unsigned char *data = realloc(r->data, cap);
    if (!data)
        return -1;
    r->data = data;
    r->data_cap = cap;
    return 0;
}

/* The libbpf ring_buffer_sample_fn: one record, in ring order. */
int ringsink_record(void *ctx, void *data, int size)
{
    struct ringsink *s = ctx;
    if (size < RINGSINK_HDR) {
        s->orphans++;
        return 0;
    }
    uint16_t key;
    memcpy(&key, (unsigned char *)data + RINGSINK_RUN_OFFSET, sizeof key);
    struct ringsink_run *r = &s->runs[key % RINGSINK_SLOTS];
    if (r->format < 0 || r->key != key) {
        s->orphans++;
        return 0;
    }
    uint32_t n = (uint32_t)size;
    if (reserve(r, (uint64_t)n + 5) < 0) {
        s->lost++;
        return 0;
    }
    unsigned char *out = r->data + r->data_len;
    uint64_t head;
    if (r->format == RINGSINK_FRAMES) {
        out[0] = n & 0xff;
        out[1] = (n >> 8) & 0xff;
        out[2] = (n >> 16) & 0xff;
        out[3] = n >> 24;
        head = 4;
    } else if (n < 0x100) {
        out[0] = 0xc4; /* bin 8 */
        out[1] = n;
        head = 2;
    } else if (n < 0x10000) {
        out[0] = 0xc5; /* bin 16, big-endian length */
        out[1] = n >> 8;
        out[2] = n & 0xff;
        head = 3;
    } else {
        out[0] = 0xc6; /* bin 32 */
        out[1] = n >> 24;
        out[2] = (n >> 16) & 0xff;
        out[3] = (n >> 8) & 0xff;
        out[4] = n & 0xff;
        head = 5;
    }
    memcpy(out + head, data, n);
    r->data_len += head + n;
    s->buffered += head + n;
    r->records++;
    r->total++;
    if (s->buffered >= s->pause_bytes) {
        s->paused = 1;
        return -1; /* keep this one (already consumed), stop the drain here */
    }
    return 0;
}

/* The run's buffer: its bytes and record count (the pointer is valid until the next call). */
const unsigned char *ringsink_peek(struct ringsink *s, uint32_t key, uint64_t *len, uint64_t *records)
{
    struct ringsink_run *r = &s->runs[key % RINGSINK_SLOTS];
    if (r->format < 0 || r->key != key) {
        *len = *records = 0;
        return NULL;
    }
    *len = r->data_len;
    *records = r->records;
    return r->data;
}

/* Empty the run's buffer (after Python copied it out). */
void ringsink_clear(struct ringsink *s, uint32_t key)
{
    struct ringsink_run *r = &s->runs[key % RINGSINK_SLOTS];
    if (r->format < 0 || r->key != key)
        return;
    s->buffered -= r->data_len;
    r->data_len = r->records = 0;
}

/* Start of a drain: forget that the last one paused. */
void ringsink_unpause(struct ringsink *s)
{
    s->paused = 0;
}

uint64_t ringsink_run_total(struct ringsink *s, uint32_t key)
{
    struct ringsink_run *r = &s->runs[key % RINGSINK_SLOTS];
    return (r->format >= 0 && r->key == key) ? r->total : 0;
}

uint64_t ringsink_orphans(struct ringsink *s)
{
    return s->orphans;
}

uint64_t ringsink_lost(struct ringsink *s)
{
    return s->lost;
}

int32_t ringsink_paused(struct ringsink *s)
{
    return s->paused;
}
