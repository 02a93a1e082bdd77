/* open_heavy SCRATCH_DIR N [RATE [MISSING]]: exactly N openat calls on marked names.
 *
 * The first min(N, 100) calls create the "existing" set; after that the calls
 * rotate between opening an existing file read-only, opening a missing file
 * (ENOENT) and creating/truncating a file, so the capture sees success and
 * error returns and read and write modes, as an agent's file scanning does.
 * With RATE > 0 the calls are paced to RATE per second (the sustained-rate
 * probe); otherwise they run flat out (the overhead benchmark).
 * Every missing name differs (a third of N distinct paths, the worst case
 * for anything that keeps a run's distinct paths) unless MISSING > 0: then
 * the missing names repeat, MISSING of them (bench.scaling's "repeated").
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>

#include "bench_common.h"

#define EXISTING 100
#define CREATED_NAMES 1000
#define PACE_BATCH 256

static void pace(double start, long done, long rate)
{
    double due = start + (double)done / (double)rate;
    double wait = due - bench_now();
    if (wait > 0) {
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: open_heavy SCRATCH_DIR N [RATE [MISSING]]\n");
        return 2;
    }
    long n = bench_count(argv[2], "N");
    long rate = argc >= 4 ? bench_count(argv[3], "RATE") : 0;
    long missing = argc == 5 ? bench_count(argv[4], "MISSING") : 0;
    int dir = open(argv[1], O_PATH | O_DIRECTORY);
    if (dir < 0)
        bench_die(argv[1]);
    long existing = n < EXISTING ? n : EXISTING;
    long counts[3] = {0, 0, 0}; /* existing, missing, created */
    char name[64];

    double start = bench_now();
    for (long i = 0; i < n; i++) {
        int kind = i < existing ? 3 : (int)(i % 3);
        int flags = O_RDONLY;
        switch (kind) {
        case 0:
            snprintf(name, sizeof name, "abench-e-%03ld", i % existing);
            break;
        case 1:
            snprintf(name, sizeof name, "abench-m-%ld", missing ? (i / 3) % missing : i);
            break;
        case 2:
            snprintf(name, sizeof name, "abench-c-%03ld", i % CREATED_NAMES);
            flags = O_CREAT | O_WRONLY | O_TRUNC;
            break;
        default:
            snprintf(name, sizeof name, "abench-e-%03ld", i);
            flags = O_CREAT | O_WRONLY | O_TRUNC;
            kind = 2;
        }
        int fd = openat(dir, name, flags | O_CLOEXEC, 0644);
        if (fd >= 0)
            close(fd);
        else if (errno != ENOENT || kind != 1)
            bench_die(name);
        counts[kind]++;
        if (rate && (i + 1) % PACE_BATCH == 0)
            pace(start, i + 1, rate);
    }
    double elapsed = bench_now() - start;

    char ops[160], expect[96];
    snprintf(ops, sizeof ops,
             "{\"openat\":%ld,\"existing\":%ld,\"missing\":%ld,\"created\":%ld,\"rate\":%ld,"
             "\"missing_names\":%ld}",
             n, counts[0], counts[1], counts[2], rate, missing);
    snprintf(expect, sizeof expect,
             "[{\"kind\":\"openat\",\"contains\":\"abench-\",\"count\":%ld}]", n);
    bench_report("open_heavy", elapsed, ops, expect);
    return 0;
}
