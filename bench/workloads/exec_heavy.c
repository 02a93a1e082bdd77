/* exec_heavy N: N fork+execv of /bin/true, each waited for in turn.
 *
 * Sequential on purpose: an agent's tool calls are mostly one short program
 * after another, and a sequential loop makes the exec count exact. Each child
 * also makes the dynamic loader's opens, so the capture sees exec, newtask and
 * openat records per iteration.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"

#define PROGRAM "/bin/true"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: exec_heavy N\n");
        return 2;
    }
    long n = bench_count(argv[1], "N");
    char *const child_argv[] = {PROGRAM, NULL};

    double start = bench_now();
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0)
            bench_die("fork");
        if (pid == 0) {
            execv(PROGRAM, child_argv);
            _exit(127);
        }
        int status;
        if (waitpid(pid, &status, 0) < 0)
            bench_die("waitpid");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "workload: %s failed (status %d)\n", PROGRAM, status);
            return 2;
        }
    }
    double elapsed = bench_now() - start;

    char ops[64], expect[96];
    snprintf(ops, sizeof ops, "{\"execve\":%ld,\"fork\":%ld}", n, n);
    snprintf(expect, sizeof expect,
             "[{\"kind\":\"exec\",\"contains\":\"bin/true\",\"count\":%ld}]", n);
    bench_report("exec_heavy", elapsed, ops, expect);
    return 0;
}
