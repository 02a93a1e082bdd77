/* Compat-ABI syscalls from a 64-bit process: what the seccomp filter refuses.
 *
 * Usage: compat_open I386_PATH X32_PATH
 * Creates I386_PATH with the i386 open(2) through `int $0x80` and X32_PATH
 * with the x32 open(2) (nr | __X32_SYSCALL_BIT), then writes a byte to
 * whichever fd it got. Prints one JSON object: each call's raw return
 * (an fd, or -errno). Exits 0 whatever the calls returned.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define I386_OPEN 5
#define I386_WRITE 4
#define I386_CLOSE 6
#define X32_BIT 0x40000000L

static long int80(long nr, long a, long b, long c)
{
    int ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
    return ret;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    /* int $0x80 passes 32-bit pointers: the path must lie below 4 GiB */
    char *low = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    if (low == MAP_FAILED)
        return 3;
    strncpy(low, argv[1], 4095);
    low[4096] = 'x';
    long i386_fd = int80(I386_OPEN, (long)low, O_CREAT | O_WRONLY, 0644);
    if (i386_fd >= 0) {
        int80(I386_WRITE, i386_fd, (long)(low + 4096), 1);
        int80(I386_CLOSE, i386_fd, 0, 0);
    }
    long x32_fd = syscall(X32_BIT | SYS_open, argv[2], O_CREAT | O_WRONLY, 0644);
    if (x32_fd < 0)
        x32_fd = -errno;
    else
        close(x32_fd);
    printf("{\"i386_open\": %ld, \"x32_open\": %ld}\n", i386_fd, x32_fd);
    return 0;
}
