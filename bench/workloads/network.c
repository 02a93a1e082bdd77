/* network TCP_N UDP_N: TCP_N connects to, and UDP_N sendto towards, loopback
 * endpoints that the workload itself opens first.
 *
 * TCP: one listener; each iteration connects (a blocking connect to loopback
 * completes the handshake before returning), accepts, and closes both ends
 * with SO_LINGER 0 so no TIME_WAIT is left behind: back-to-back repetitions
 * would otherwise run out of ephemeral ports. UDP: one unconnected socket
 * sends a small datagram to a bound receiver; the receiver never reads, so
 * most datagrams are dropped by the kernel, but every sendto is a syscall
 * the tracer must see. The ports are reported so the harness can count the
 * workload's own connect and datagram records.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_common.h"

static struct sockaddr_in bound_loopback(int fd, int type)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
        bench_die("bind");
    if (type == SOCK_STREAM && listen(fd, 128) < 0)
        bench_die("listen");
    if (getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        bench_die("getsockname");
    return a;
}

static void close_hard(int fd)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: network TCP_N UDP_N\n");
        return 2;
    }
    long tcp_n = bench_count(argv[1], "TCP_N");
    long udp_n = bench_count(argv[2], "UDP_N");
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int receiver = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int sender = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (listener < 0 || receiver < 0 || sender < 0)
        bench_die("socket");
    struct sockaddr_in tcp_addr = bound_loopback(listener, SOCK_STREAM);
    struct sockaddr_in udp_addr = bound_loopback(receiver, SOCK_DGRAM);
    static const char payload[] = "assay-bench";

    double start = bench_now();
    for (long i = 0; i < tcp_n; i++) {
        int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c < 0)
            bench_die("socket");
        if (connect(c, (struct sockaddr *)&tcp_addr, sizeof tcp_addr) < 0)
            bench_die("connect");
        int s = accept(listener, NULL, NULL);
        if (s < 0)
            bench_die("accept");
        close_hard(c);
        close(s);
    }
    for (long i = 0; i < udp_n; i++) {
        if (sendto(sender, payload, sizeof payload, 0, (struct sockaddr *)&udp_addr,
                   sizeof udp_addr) < 0)
            bench_die("sendto");
    }
    double elapsed = bench_now() - start;

    int tcp_port = ntohs(tcp_addr.sin_port), udp_port = ntohs(udp_addr.sin_port);
    char ops[128], expect[256];
    snprintf(ops, sizeof ops, "{\"connect\":%ld,\"sendto\":%ld,\"tcp_port\":%d,\"udp_port\":%d}",
             tcp_n, udp_n, tcp_port, udp_port);
    snprintf(expect, sizeof expect,
             "[{\"kind\":\"connect\",\"contains\":\":%d\",\"count\":%ld},"
             "{\"kind\":\"event_6\",\"contains\":\":%d\",\"count\":%ld}]",
             tcp_port, tcp_n, udp_port, udp_n);
    bench_report("network", elapsed, ops, expect);
    return 0;
}
