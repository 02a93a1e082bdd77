/* assay-runner's fast client: `assay-runner run ... -- CMD` through the daemon, without Python.
 *
 * `make setup` builds this as the `assay-runner` entry point of the venv
 * (scripts/setup.sh); the Python CLI stays as `assay-runner-py`. A run
 * through the daemon spent 70-100 ms of CPU in Python's start-up (the
 * venv's site, the editable finder, the CLI's imports) before its first
 * byte reached the daemon; this client needs about 1 ms.
 *
 * It serves only the common shape of a daemon run and hands everything else
 * to the Python CLI unchanged (execv of assay-runner-py with the same argv):
 * help, other subcommands, options it does not know (or abbreviated, or a
 * policy, --user, limits, --direct), no daemon socket, a socket it cannot
 * connect to, and every input the Python client would refuse (command not
 * found or not executable, --out not writable, an archive already there, a
 * run id it cannot prove harmless here...). The Python CLI then does exactly
 * what it always did, error lines included, so the user sees the same thing
 * either way. Nothing is sent to the daemon before the fallback is ruled out.
 *
 * What it does on its path mirrors runner/daemon/client.py and
 * runner/capture/inputs.py (command_inputs, create_out_dir) step by step:
 * resolve the command as execve will see it from the working directory, make
 * and check --out as the caller, then send `RunStart` (runner/daemon/protocol.py,
 * msgpack) with stdin/stdout/stderr, the --out fd and the working directory
 * fd (SCM_RIGHTS), and mirror the run: the live status line, Ctrl-C as
 * `Interrupt`, the summary, the exit code. tests/test_fastclient.py checks
 * that both clients send the same request and print the same thing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define PROTOCOL_VERSION 1          /* protocol.VERSION */
#define DEFAULT_RINGBUF_PAGES 1024  /* ebpf.wire.DEFAULT_RINGBUF_PAGES */
#define RUN_ID_MAX 128              /* normalizer.artifacts.RUN_ID_MAX */
#define MAX_FRAME (1u << 20)        /* protocol.MAX_FRAME */
#define RLIMITS 16                  /* RLIM_NLIMITS; Python's resource module has all but RLIMIT_LOCKS */
#define REFRESH_S 0.25              /* runner.capture.status.REFRESH_S */
static const char DEFAULT_SOCKET[] = "/run/assay-runner/runner.sock";
static const char DEFAULT_OUT[] = "/var/lib/assay-runner/runs";
static const char FALLBACK[] = "assay-runner-py";

static char **g_argv;
static int status_capable(void); /* the status row (below): also whether the daemon sends progress */

/* --- falling back to the Python CLI ------------------------------------------------------- */

/* Replace this process by the Python CLI with the same arguments; never returns. */
static void fallback(void)
{
    char self[PATH_MAX], target[PATH_MAX + sizeof FALLBACK];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) {
            slash[1] = 0;
            snprintf(target, sizeof target, "%s%s", self, FALLBACK);
            execv(target, g_argv);
        }
    }
    fprintf(stderr, "assay-runner: error: cannot start the Python CLI (%s next to %s): %s; run make setup\n",
            FALLBACK, n > 0 ? self : "this program", strerror(errno));
    _exit(125);
}

/* --- growing buffers ----------------------------------------------------------------------- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
} buf_t;

static void put(buf_t *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            fallback();
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_be(buf_t *b, uint64_t v, int bytes)
{
    unsigned char tmp[8];
    for (int i = 0; i < bytes; i++)
        tmp[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
    put(b, tmp, bytes);
}

static void put_byte(buf_t *b, unsigned char c) { put(b, &c, 1); }

/* strdup, or the Python CLI when memory is short (as every allocation here). */
static char *xstrdup(const char *s)
{
    char *copy = strdup(s);
    if (!copy)
        fallback();
    return copy;
}

static char *path_join(const char *dir, const char *name)
{
    size_t d = strlen(dir);
    char *out = malloc(d + strlen(name) + 2);
    if (!out)
        fallback();
    sprintf(out, "%s%s%s", dir, d && dir[d - 1] == '/' ? "" : "/", name);
    return out;
}

/* --- msgpack, the subset protocol.py's messages use ----------------------------------------- */

static void mp_head(buf_t *b, unsigned fix, unsigned fixmax, unsigned char c8, unsigned char c16,
                    unsigned char c32, size_t n)
{
    if (fix && n <= fixmax)
        put_byte(b, (unsigned char)(fix | n));
    else if (c8 && n < 0x100) {
        put_byte(b, c8);
        put_be(b, n, 1);
    } else if (n < 0x10000) {
        put_byte(b, c16);
        put_be(b, n, 2);
    } else {
        put_byte(b, c32);
        put_be(b, n, 4);
    }
}

static void mp_str(buf_t *b, const char *s)
{
    size_t n = strlen(s);
    mp_head(b, 0xa0, 31, 0xd9, 0xda, 0xdb, n);
    put(b, s, n);
}

static void mp_bin(buf_t *b, const char *s, size_t n)
{
    mp_head(b, 0, 0, 0xc4, 0xc5, 0xc6, n);
    put(b, s, n);
}

static void mp_int(buf_t *b, int64_t v)
{
    if (v >= 0 && v < 128)
        put_byte(b, (unsigned char)v);
    else if (v >= -32 && v < 0)
        put_byte(b, (unsigned char)(0xe0 | (v + 32)));
    else {
        put_byte(b, 0xd3);
        put_be(b, (uint64_t)v, 8);
    }
}

static void mp_array(buf_t *b, size_t n) { mp_head(b, 0x90, 15, 0, 0xdc, 0xdd, n); }
static void mp_map(buf_t *b, size_t n) { mp_head(b, 0x80, 15, 0, 0xde, 0xdf, n); }

typedef struct {
    const unsigned char *p, *end;
    int bad;
} rd_t;

static uint64_t rd_be(rd_t *r, int bytes)
{
    uint64_t v = 0;
    if (r->end - r->p < bytes) {
        r->bad = 1;
        return 0;
    }
    for (int i = 0; i < bytes; i++)
        v = (v << 8) | *r->p++;
    return v;
}

/* Reads one value: an int or float into *num, a str into *str and *len; others are skipped. */
static int rd_value(rd_t *r, double *num, const char **str, size_t *len, int depth)
{
    if (r->p >= r->end || depth > 8) {
        r->bad = 1;
        return 0;
    }
    unsigned c = *r->p++;
    size_t n = 0, items = 0;
    if (c < 0x80) {
        *num = c;
        return 'i';
    }
    if (c >= 0xe0) {
        *num = (int8_t)c;
        return 'i';
    }
    if ((c & 0xe0) == 0xa0)
        n = c & 0x1f;
    else if ((c & 0xf0) == 0x90 || (c & 0xf0) == 0x80)
        items = (c & 0x0f) * ((c & 0xf0) == 0x80 ? 2 : 1);
    else
        switch (c) {
        case 0xc0: case 0xc2: case 0xc3:
            return 'o';
        case 0xcc: *num = (double)rd_be(r, 1); return 'i';
        case 0xcd: *num = (double)rd_be(r, 2); return 'i';
        case 0xce: *num = (double)rd_be(r, 4); return 'i';
        case 0xcf: *num = (double)rd_be(r, 8); return 'i';
        case 0xd0: *num = (int8_t)rd_be(r, 1); return 'i';
        case 0xd1: *num = (int16_t)rd_be(r, 2); return 'i';
        case 0xd2: *num = (int32_t)rd_be(r, 4); return 'i';
        case 0xd3: *num = (double)(int64_t)rd_be(r, 8); return 'i';
        case 0xca: { uint32_t u = (uint32_t)rd_be(r, 4); float f; memcpy(&f, &u, 4); *num = f; return 'f'; }
        case 0xcb: { uint64_t u = rd_be(r, 8); double d; memcpy(&d, &u, 8); *num = d; return 'f'; }
        case 0xd9: case 0xc4: n = rd_be(r, 1); break;
        case 0xda: case 0xc5: n = rd_be(r, 2); break;
        case 0xdb: case 0xc6: n = rd_be(r, 4); break;
        case 0xdc: items = rd_be(r, 2); break;
        case 0xdd: items = rd_be(r, 4); break;
        case 0xde: items = 2 * rd_be(r, 2); break;
        case 0xdf: items = 2 * rd_be(r, 4); break;
        default: r->bad = 1; return 0; /* ext types: protocol.py never sends them */
        }
    if (items) {
        for (size_t i = 0; i < items && !r->bad; i++)
            rd_value(r, num, str, len, depth + 1);
        return 'o';
    }
    if ((size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return 0;
    }
    *str = (const char *)r->p;
    *len = n;
    r->p += n;
    return (c & 0xe0) == 0xa0 || (c >= 0xd9 && c <= 0xdb) ? 's' : 'o';
}

/* --- the command, the run id, --out: inputs.command_inputs and create_out_dir -------------- */

/* str(Path(p)) for an absolute p: empty and "." components dropped, no trailing slash.
 * NULL for a leading "//" (Path keeps it, the kernel does not care; not worth the difference). */
static char *path_normal(const char *p)
{
    if (p[0] != '/' || (p[1] == '/' && p[2] != '/'))
        return NULL;
    char *out = malloc(strlen(p) + 2), *o = out;
    if (!out)
        fallback();
    const char *s = p;
    while (*s) {
        while (*s == '/')
            s++;
        const char *e = strchrnul(s, '/');
        size_t n = (size_t)(e - s);
        if (n && !(n == 1 && s[0] == '.')) {
            *o++ = '/';
            memcpy(o, s, n);
            o += n;
        }
        s = e;
    }
    if (o == out)
        *o++ = '/';
    *o = 0;
    return out;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* shutil.which's test: exists, executable by our real ids, not a directory. */
static int runnable(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && access(p, X_OK) == 0 && !S_ISDIR(st.st_mode);
}

/* inputs.resolve_command on its success path; NULL: let the Python CLI say what is wrong. */
static char *resolve_command(const char *name, const char *workdir, const char *path_env)
{
    char *found = NULL;
    if (strchr(name, '/')) {
        if (name[0] == '/')
            found = path_normal(name);
        else {
            char *joined = path_join(workdir, name), real[PATH_MAX];
            if (realpath(joined, real))
                found = xstrdup(real);
            free(joined);
        }
        if (!found || !runnable(found))
            return NULL;
        return found;
    }
    const char *search = path_env ? path_env : "/bin:/usr/bin"; /* os.defpath */
    if (!*search)
        return NULL;
    char *copy = xstrdup(search), *save = NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        if (dir[0] != '/')
            break; /* a relative entry is resolved against our cwd by Python: not here */
        char *candidate = path_join(dir, name);
        if (runnable(candidate)) {
            found = path_normal(candidate);
            free(candidate);
            break;
        }
        free(candidate);
    }
    /* an empty entry (strtok_r skips "::", a leading or trailing ':') means the cwd to Python */
    if (strstr(search, "::") || search[0] == ':' || search[strlen(search) - 1] == ':') {
        free(found);
        found = NULL;
    }
    free(copy);
    return found;
}

/* The literals of normalizer/redact.py's NEEDLES that a run id can hold, lower-cased: every match
 * of every redaction rule contains one of its rule's literals, so an id holding none of them, in
 * any case, cannot look like a secret (tests/test_fastclient.py keeps this list equal to NEEDLES). */
static const char *const SECRET_LITERALS[] = {
    "akia", "asia", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "sk-", "xox", "aiza", "k_live_", "k_test_",
    "eyj", "bearer", "key", "secret", "token", "passw",
};

/* A run id the Python client would accept (inputs.check_run_id), proven here: the run id charset
 * and length, and none of the redaction rules' literals in it. */
static int run_id_ok(const char *id)
{
    size_t n = strlen(id);
    char lower[RUN_ID_MAX + 1];
    if (n == 0 || n > RUN_ID_MAX)
        return 0;
    for (size_t i = 0; i <= n; i++) {
        char c = id[i];
        if (c && !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                   c == '-'))
            return 0;
        lower[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    for (size_t i = 0; i < sizeof SECRET_LITERALS / sizeof SECRET_LITERALS[0]; i++)
        if (strstr(lower, SECRET_LITERALS[i]))
            return 0;
    return 1;
}

/* inputs.check_run_id's generated id: run-<UTC stamp>-<4 hex digits>. */
static char *generated_run_id(void)
{
    static char id[64];
    unsigned char rnd[2];
    time_t now = time(NULL);
    struct tm tm;
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
        fallback();
    gmtime_r(&now, &tm);
    size_t n = strftime(id, sizeof id, "run-%Y%m%dT%H%M%SZ-", &tm);
    snprintf(id + n, sizeof id - n, "%02x%02x", rnd[0], rnd[1]);
    return id;
}

/* Path(p).resolve() for a p without "." or ".." components: the deepest existing prefix resolved,
 * the rest appended. NULL when anything else happens (the Python CLI decides). */
static char *resolve_out(const char *abs)
{
    char *tail = xstrdup(abs), real[PATH_MAX];
    size_t cut = strlen(tail);
    while (1) {
        char saved = tail[cut];
        tail[cut] = 0;
        if (realpath(cut ? tail : "/", real)) {
            tail[cut] = saved;
            char *out = malloc(strlen(real) + strlen(tail + cut) + 2);
            if (!out)
                fallback();
            sprintf(out, "%s%s", strcmp(real, "/") ? real : "", tail + cut);
            if (!out[0])
                strcpy(out, "/");
            free(tail);
            return out;
        }
        tail[cut] = saved;
        if (errno != ENOENT || cut == 0)
            break;
        while (cut > 0 && tail[cut - 1] != '/')
            cut--;
        if (cut > 0)
            cut--;
    }
    free(tail);
    return NULL;
}

/* inputs.make_dirs: the missing directories of `p`, each 0755 whatever the umask; one that a
 * concurrent run made first (mkdir's EEXIST on a directory) is theirs and keeps its mode. */
static int make_dirs(const char *p)
{
    if (is_dir(p))
        return 0;
    char *parent = xstrdup(p), *slash = strrchr(parent, '/');
    int rc = 0;
    if (slash && slash != parent) {
        *slash = 0;
        rc = make_dirs(parent);
    }
    free(parent);
    if (rc)
        return rc;
    if (mkdir(p, 0755) != 0)
        return errno == EEXIST && is_dir(p) ? 0 : -1;
    return chmod(p, 0755);
}

/* inputs.create_out_dir up to the partial spool's removal; -1: the Python CLI takes over. */
static int create_out_dir(const char *out, const char *run_id, int force)
{
    char name[PATH_MAX];
    if (make_dirs(out) != 0)
        return -1;
    unsigned char rnd[6];
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
        return -1;
    if (snprintf(name, sizeof name, "%s/.assay-write-check-%02x%02x%02x%02x%02x%02x", out, rnd[0], rnd[1],
                 rnd[2], rnd[3], rnd[4], rnd[5]) >= (int)sizeof name)
        return -1; /* a path the kernel would refuse (ENAMETOOLONG): the Python CLI says so */
    int fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    close(fd);
    unlink(name);
    struct stat st;
    const char *suffixes[] = {".tar.gz", ".spool.partial"};
    for (int i = 0; i < 2 && !force; i++) {
        if (snprintf(name, sizeof name, "%s/%s%s", out, run_id, suffixes[i]) >= (int)sizeof name ||
            lstat(name, &st) == 0)
            return -1;
    }
    int dir = open(out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); /* spool.dirfd.open_dir */
    if (dir < 0)
        return -1;
    snprintf(name, sizeof name, "%s.spool.partial", run_id);
    int rc = unlinkat(dir, name, 0) == 0 || errno == ENOENT ? 0 : -1;
    close(dir);
    return rc;
}

/* --- the request ---------------------------------------------------------------------------- */

typedef struct {
    const char *socket, *out, *run_id, *workdir, *net, *ringbuf;
    int force;
    char **cmd;
} options_t;

/* The options this client knows, exactly as argparse spells them; 0: something else. */
static int parse(int argc, char **argv, options_t *o)
{
    if (argc < 2 || strcmp(argv[1], "run") != 0)
        return 0;
    struct { const char *name; const char **value; } valued[] = {
        {"--socket", &o->socket}, {"--out", &o->out}, {"--run-id", &o->run_id},
        {"--workdir", &o->workdir}, {"--net", &o->net}, {"--ringbuf-pages", &o->ringbuf},
    };
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) { /* a command that is itself "--": argparse's REMAINDER rules */
            o->cmd = argv + i + 1;
            return argv[i + 1] != NULL && strcmp(argv[i + 1], "--") != 0;
        }
        if (strcmp(a, "--daemon") == 0)
            continue;
        if (strcmp(a, "--force") == 0) {
            o->force = 1;
            continue;
        }
        size_t k, count = sizeof valued / sizeof valued[0];
        for (k = 0; k < count; k++) {
            size_t n = strlen(valued[k].name);
            if (strncmp(a, valued[k].name, n) != 0)
                continue;
            if (a[n] == '=')
                *valued[k].value = a + n + 1;
            else if (a[n] == 0 && i + 1 < argc && argv[i + 1][0] != '-')
                *valued[k].value = argv[++i];
            else
                continue;
            break;
        }
        if (k == count || !**valued[k].value)
            return 0;
    }
    return 0; /* no "--": argparse's REMAINDER rules are the Python CLI's to apply */
}

static int clean_relative(const char *p)
{
    /* no empty, "." or ".." component (Path and make_dirs would treat them their own way) */
    const char *s = p[0] == '/' ? p + 1 : p;
    while (1) {
        const char *e = strchrnul(s, '/');
        size_t n = (size_t)(e - s);
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return 0;
        if (!*e)
            return 1;
        s = e + 1;
    }
}

static int digits(const char *s)
{
    if (!*s || strlen(s) > 9)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* The environment as Python's os.environ sees it, or 0 when Python would see it differently
 * (an entry without '=' or starting with one, a name given twice: Python keeps the first). */
static int environment_ok(void)
{
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || eq == *e)
            return 0;
        for (char **f = environ; f < e; f++)
            if (strncmp(*f, *e, (size_t)(eq - *e) + 1) == 0)
                return 0;
    }
    return 1;
}

static int utf8_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 : (*p & 0xf8) == 0xf0 ? 3 : -1;
        if (n < 0 || (n == 1 && *p < 0xc2))
            return 0;
        p++;
        for (int i = 0; i < n; i++, p++)
            if ((*p & 0xc0) != 0x80)
                return 0;
    }
    return 1; /* overlong 3-4 byte forms and surrogates are left to the daemon's decoder */
}

static void encode_request(buf_t *b, const options_t *o, const char *run_id, const char *exe,
                           const char *workdir, const char *out_display)
{
    size_t argc = 0, envc = 0;
    while (o->cmd[argc])
        argc++;
    while (environ[envc])
        envc++;
    mode_t mask = umask(022);
    umask(mask);
    mp_map(b, 15);
    mp_str(b, "type"); mp_str(b, "run");
    mp_str(b, "version"); mp_int(b, PROTOCOL_VERSION);
    mp_str(b, "run_id"); mp_str(b, run_id);
    mp_str(b, "exe"); mp_bin(b, exe, strlen(exe));
    mp_str(b, "argv"); mp_array(b, argc);
    for (size_t i = 0; i < argc; i++)
        mp_bin(b, o->cmd[i], strlen(o->cmd[i]));
    mp_str(b, "env"); mp_map(b, envc);
    for (size_t i = 0; i < envc; i++) {
        const char *eq = strchr(environ[i], '=');
        mp_bin(b, environ[i], (size_t)(eq - environ[i]));
        mp_bin(b, eq + 1, strlen(eq + 1));
    }
    mp_str(b, "workdir"); mp_bin(b, workdir, strlen(workdir));
    mp_str(b, "out_display"); mp_str(b, out_display);
    mp_str(b, "ringbuf_pages"); mp_int(b, o->ringbuf ? atoi(o->ringbuf) : DEFAULT_RINGBUF_PAGES);
    mp_str(b, "isolate_net"); put_byte(b, o->net && strcmp(o->net, "isolated") == 0 ? 0xc3 : 0xc2);
    mp_str(b, "user"); put_byte(b, 0xc0);
    mp_str(b, "policy"); put_byte(b, 0xc0);
    mp_str(b, "status_line"); put_byte(b, status_capable() ? 0xc3 : 0xc2);
    mp_str(b, "umask"); mp_int(b, mask);
    mp_str(b, "rlimits"); mp_array(b, RLIMITS - 1);
    for (int r = 0; r < RLIMITS; r++) {
        struct rlimit rl;
        if (r == RLIMIT_LOCKS)
            continue; /* as the Python client, which cannot read it, sends it */
        getrlimit(r, &rl);
        mp_array(b, 3);
        mp_int(b, r);
        mp_int(b, rl.rlim_cur == RLIM_INFINITY ? -1 : (int64_t)rl.rlim_cur);
        mp_int(b, rl.rlim_max == RLIM_INFINITY ? -1 : (int64_t)rl.rlim_max);
    }
}

/* --- the status row: runner/capture/terminal.py StatusRow, step for step -------------------- */

#define MIN_ROWS 4  /* terminal.MIN_ROWS */
#define MIN_COLS 20 /* terminal.MIN_COLS */
static int g_rows, g_cols;              /* the terminal's real size while the row is taken, else 0 */
static volatile sig_atomic_t g_resized; /* SIGWINCH seen: acted on at the next draw */
static char g_give_back[64];            /* built when the row is taken: written from signal handlers */
static size_t g_give_back_n;

static int status_capable(void)
{
    struct winsize ws;
    const char *term = getenv("TERM");
    return isatty(2) && term && *term && strcmp(term, "dumb") != 0 && ioctl(2, TIOCGWINSZ, &ws) == 0 &&
           ws.ws_row >= MIN_ROWS && ws.ws_col >= MIN_COLS;
}

static void set_rows(int rows, int cols)
{
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    (void)ioctl(2, TIOCSWINSZ, &ws);
}

/* Async-signal-safe: only write(2) and ioctl(2) on what _take prepared. */
static void status_give_back(void)
{
    if (!g_rows)
        return;
    set_rows(g_rows, g_cols);
    g_rows = 0;
    (void)!write(2, g_give_back, g_give_back_n);
}

static void on_winch(int signum)
{
    (void)signum;
    g_resized = 1;
}

static void on_tstp(int signum)
{
    (void)signum;
    int saved = errno;
    status_give_back();
    raise(SIGSTOP);
    errno = saved;
}

static void on_end(int signum)
{
    status_give_back();
    signal(signum, SIG_DFL);
    raise(signum);
}

static void status_take(void)
{
    struct winsize ws;
    if (ioctl(2, TIOCGWINSZ, &ws) != 0 || ws.ws_row < MIN_ROWS || ws.ws_col < MIN_COLS)
        return;
    struct sigaction sa = {.sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, NULL);
    sa.sa_handler = on_tstp;
    sigaction(SIGTSTP, &sa, NULL);
    g_cols = ws.ws_col, g_resized = 0;
    g_give_back_n = (size_t)snprintf(g_give_back, sizeof g_give_back, "\0337\033[r\033[%d;1H\033[0m\033[2K\0338",
                                     ws.ws_row);
    dprintf(2, "\033D\033[1A\0337\033[1;%dr\0338", ws.ws_row - 1);
    set_rows(ws.ws_row - 1, ws.ws_col);
    g_rows = ws.ws_row;
}

static void status_draw(double events, double drops, double elapsed)
{
    if (!g_rows)
        status_take();
    else if (g_resized) {
        struct winsize ws;
        g_resized = 0;
        if (ioctl(2, TIOCGWINSZ, &ws) == 0 && !(ws.ws_row == g_rows - 1 && ws.ws_col == g_cols)) {
            dprintf(2, "\0337\033[r\033[%d;1H\033[2K\0338", g_rows); /* a real resize: take the new last row */
            g_rows = 0;
            status_take();
        }
    }
    if (!g_rows)
        return;
    char text[160];
    int n = snprintf(text, sizeof text, "[assay-runner] %.0f events \xc2\xb7 %.0f drops \xc2\xb7 %.1fs", events, drops,
                     elapsed);
    int width = 0; /* bytes of the first g_cols - 1 characters, as Python's text[:cols - 1] */
    for (int chars = 0; width < n && (chars < g_cols - 1 || (text[width] & 0xc0) == 0x80); width++)
        chars += (text[width] & 0xc0) != 0x80;
    dprintf(2, "\0337\033[%d;1H\033[0m\033[2K%.*s\0338", g_rows, width, text);
}

/* --- the run: send, then mirror ----------------------------------------------------------- */

static int g_sock = -1;
static const unsigned char INTERRUPT[] = {0, 0, 0, 0x10, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xa9,
                                          'i', 'n', 't', 'e', 'r', 'r', 'u', 'p', 't'};

static void on_sigint(int signum)
{
    (void)signum;
    int saved = errno;
    (void)!send(g_sock, INTERRUPT, sizeof INTERRUPT, MSG_NOSIGNAL);
    errno = saved;
}

static double monotonic(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* What the Python CLI prints for a RunnerError: "assay-runner: error: ..." through printable();
 * the daemon escapes its messages already (protocol.refused), ASCII controls are escaped again here. */
static void error_line(const char *msg, size_t n)
{
    buf_t b = {0};
    put(&b, "assay-runner: error: ", 21);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)msg[i];
        if (c < 0x20 || c == 0x7f) {
            char esc[5];
            snprintf(esc, sizeof esc, "\\x%02x", c);
            put(&b, esc, 4);
        } else
            put_byte(&b, c);
    }
    put_byte(&b, '\n');
    (void)!write(2, b.p, b.n);
}

static int read_full(int fd, unsigned char *p, size_t n)
{
    while (n) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* runner/daemon/client.py _mirror: the daemon's messages until the run is finished. */
static int mirror(int sock, const char *out, int out_existed, const sigset_t *unblock)
{
    int tty = status_capable();
    double next = monotonic() + REFRESH_S;
    static unsigned char body[MAX_FRAME];
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    g_sock = sock;
    sigaction(SIGINT, &sa, NULL);
    sigprocmask(SIG_UNBLOCK, unblock, NULL); /* a Ctrl-C held since the request went out arrives now */
    sa.sa_handler = on_end; /* the daemon ends the run when we go: the terminal is given back first */
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    while (1) {
        unsigned char head[4];
        uint32_t size;
        if (read_full(sock, head, 4) != 0) {
            static const char gone[] = "the assay-runner daemon closed the connection before the run "
                                       "finished; see its log (journalctl -u assay-runner)";
            status_give_back();
            if (!out_existed)
                rmdir(out);
            error_line(gone, sizeof gone - 1);
            return 125;
        }
        size = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 | head[3];
        if (size > MAX_FRAME || read_full(sock, body, size) != 0) {
            static const char bad[] = "bad reply from the daemon: frame too large or cut short";
            status_give_back();
            error_line(bad, sizeof bad - 1);
            return 125;
        }
        rd_t r = {body, body + size, 0};
        double num = 0, events = 0, drops = 0, elapsed = 0, code = 125;
        const char *type = NULL, *text = NULL, *s = NULL;
        size_t type_n = 0, text_n = 0, n = 0, fields = 0;
        unsigned c = size ? body[0] : 0;
        if ((c & 0xf0) == 0x80)
            fields = c & 0x0f, r.p++;
        else if (c == 0xde)
            r.p++, fields = rd_be(&r, 2);
        else
            r.bad = 1;
        for (size_t i = 0; i < fields && !r.bad; i++) {
            const char *key = NULL;
            size_t key_n = 0;
            if (rd_value(&r, &num, &key, &key_n, 0) != 's')
                r.bad = 1;
            int kind = rd_value(&r, &num, &s, &n, 0);
#define KEY(k) (key_n == sizeof k - 1 && memcmp(key, k, key_n) == 0)
            /* a known field of the wrong type is a protocol error, as protocol.decode_daemon says
             * (msgspec: an int field takes only an int, a float field an int or a float) */
            int is_int = kind == 'i', is_str = kind == 's';
            if (KEY("type"))
                type = s, type_n = n, r.bad |= !is_str;
            else if (KEY("summary") || KEY("message"))
                text = s, text_n = n, r.bad |= !is_str;
            else if (KEY("events"))
                events = num, r.bad |= !is_int;
            else if (KEY("drops"))
                drops = num, r.bad |= !is_int;
            else if (KEY("elapsed_s"))
                elapsed = num, r.bad |= !is_int && kind != 'f';
            else if (KEY("exit_code"))
                code = num, r.bad |= !is_int;
#undef KEY
        }
        if (r.bad || !type) {
            static const char bad[] = "bad reply from the daemon: not a message of its protocol";
            status_give_back();
            error_line(bad, sizeof bad - 1);
            return 125;
        }
#define TYPE(t) (type_n == sizeof t - 1 && memcmp(type, t, type_n) == 0)
        if (TYPE("progress")) {
            double now = monotonic();
            if (tty && now >= next) {
                next = now + REFRESH_S;
                status_draw(events, drops, elapsed);
            }
        } else if (TYPE("finished") || TYPE("refused")) {
            status_give_back();
            if (TYPE("finished")) {
                dprintf(2, "%.*s\n", (int)text_n, text ? text : "");
            } else {
                if (!out_existed)
                    rmdir(out);
                error_line(text ? text : "", text_n);
            }
            return (int)code;
        }
#undef TYPE
    }
}

/* Ctrl-C before the run is sent: what the Python CLI says for a KeyboardInterrupt. */
static void on_early_sigint(int signum)
{
    (void)signum;
    static const char msg[] = "assay-runner: interrupted\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(130);
}

int main(int argc, char **argv)
{
    g_argv = argv;
    signal(SIGINT, on_early_sigint); /* execv (the fallback) puts the default back */
    signal(SIGPIPE, SIG_IGN);         /* as Python does: a closed stderr is an error, not a death */
    options_t o = {0};
    if (!parse(argc, argv, &o) || !environment_ok())
        fallback();
    if (o.net && strcmp(o.net, "host") != 0 && strcmp(o.net, "isolated") != 0)
        fallback();
    if (o.ringbuf && !digits(o.ringbuf))
        fallback();
    const char *sock_path = o.socket ? o.socket : getenv("ASSAY_RUNNER_SOCKET");
    if (!sock_path || !*sock_path)
        sock_path = DEFAULT_SOCKET;
    struct stat st;
    int forced = 0;
    for (int i = 2; argv[i] && strcmp(argv[i], "--") != 0; i++)
        forced |= strcmp(argv[i], "--daemon") == 0;
    if (!forced && stat(sock_path, &st) != 0)
        fallback(); /* no daemon here: direct mode, the Python CLI's */

    const char *run_id = o.run_id ? o.run_id : generated_run_id();
    if (!run_id_ok(run_id))
        fallback();
    char cwd[PATH_MAX], workdir[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        fallback();
    if (o.workdir) {
        char *joined = o.workdir[0] == '/' ? xstrdup(o.workdir) : path_join(cwd, o.workdir);
        if (!realpath(joined, workdir) || !is_dir(workdir))
            fallback();
        free(joined);
    } else if (!realpath(cwd, workdir))
        fallback();
    char *exe = resolve_command(o.cmd[0], workdir, getenv("PATH"));
    if (!exe)
        fallback();
    const char *out_arg = o.out ? o.out : DEFAULT_OUT;
    if (!clean_relative(out_arg))
        fallback();
    char *out = out_arg[0] == '/' ? xstrdup(out_arg) : path_join(cwd, out_arg);
    char *out_display = resolve_out(out);
    if (!out_display || !utf8_ok(out_display) || !utf8_ok(run_id))
        fallback();

    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(sock_path) >= sizeof addr.sun_path)
        fallback();
    strcpy(addr.sun_path, sock_path);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock >= 0 && sock < 3) { /* a closed stdin, stdout or stderr stays closed: it is sent as /dev/null */
        int high = fcntl(sock, F_DUPFD_CLOEXEC, 3);
        close(sock);
        sock = high;
    }
    if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0)
        fallback(); /* the Python CLI says why, in its words (no daemon, not allowed, stale) */

    int out_existed = is_dir(out);
    if (create_out_dir(out, run_id, o.force) != 0)
        fallback(); /* nothing was sent: the Python CLI checks again and says what is wrong */

    buf_t req = {0};
    put_be(&req, 0, 4);
    encode_request(&req, &o, run_id, exe, workdir, out_display);
    uint32_t body = (uint32_t)(req.n - 4);
    if (body > MAX_FRAME)
        fallback(); /* the Python client's ProtocolError */
    for (int i = 0; i < 4; i++)
        req.p[i] = (unsigned char)(body >> (8 * (3 - i)));

    int fds[5];
    for (int i = 0; i < 3; i++)
        fds[i] = fcntl(i, F_GETFD) >= 0 ? i : open("/dev/null", O_RDWR | O_CLOEXEC);
    fds[3] = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    fds[4] = open(workdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fds[3] < 0 || fds[4] < 0)
        fallback();
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec iov = {req.p, req.n};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof control};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cm), fds, sizeof fds);
    /* From the first byte sent, the daemon has a run: a Ctrl-C must reach it as `Interrupt`
     * (recorded as sigint), never as this process dying mid-request (client_disconnected). It
     * is held from here until mirror's handler is in place, and delivered then. */
    sigset_t sigint;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    sigprocmask(SIG_BLOCK, &sigint, NULL);
    ssize_t sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
    size_t done = sent > 0 ? (size_t)sent : 0;
    while (sent >= 0 && done < req.n) { /* the rest of the frame, without the fds */
        sent = send(sock, req.p + done, req.n - done, MSG_NOSIGNAL);
        done += sent > 0 ? (size_t)sent : 0;
    }
    /* a send that failed: the daemon refused us at once, and its reason is waiting to be read */
    close(fds[3]);
    close(fds[4]);
    return mirror(sock, out, out_existed, &sigint);
}
