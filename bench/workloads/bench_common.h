/* Shared by the C workloads: the clock and the one-line JSON report.
 *
 * Every workload measures its own elapsed time from just before its first
 * traced operation to just after its last one, and prints it on stdout as one
 * line starting with "ABENCH " (the harness scans for that prefix, so other
 * output, e.g. from a runner passing stdout through, does not confuse it).
 * That is "the command's own time": runner/tracer start-up and shutdown are
 * outside it, so ratios measure the per-syscall overhead only.
 *
 * File names the workloads touch carry the marker "abench-" so the harness can
 * count the workload's own events in a capture, apart from the dynamic
 * loader's opens.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void bench_die(const char *what)
{
    fprintf(stderr, "workload: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* Parses a non-negative count argument, exiting with a message when invalid. */
static inline long bench_count(const char *s, const char *name)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0) {
        fprintf(stderr, "workload: %s must be a non-negative integer, got '%s'\n", name, s);
        exit(2);
    }
    return v;
}

/* Prints the report line. `ops` and `expect` are JSON fragments: an object of
 * operation counts, and a list of {kind, contains, count} expectations the
 * harness checks against a capture ("every event present"). */
static inline void bench_report(const char *workload, double elapsed, const char *ops,
                                const char *expect)
{
    printf("ABENCH {\"workload\":\"%s\",\"elapsed_s\":%.6f,\"ops\":%s,\"expect\":%s}\n",
           workload, elapsed, ops, expect);
    fflush(stdout);
}

#endif
