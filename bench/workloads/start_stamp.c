/* start_stamp: prints CLOCK_REALTIME (ns) as the first thing main() does.
 *
 * The harness notes the realtime clock just before it starts a runner or
 * tracer with this program as the command; the difference is the start-to-
 * exec latency the user waits through (for the runner: Python start-up, BCC
 * compile and attach, cgroup and namespace set-up, spawn).
 */
#include <stdio.h>
#include <time.h>

int main(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("ABENCH {\"workload\":\"start_stamp\",\"elapsed_s\":0,\"ops\":{},\"expect\":[],"
           "\"realtime_ns\":%lld}\n",
           (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    return 0;
}
