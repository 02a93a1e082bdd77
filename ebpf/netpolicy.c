/* Network policy: cgroup sock_addr programs, rules per run in maps.
 *
 * Appended to monitor.c by ebpf/monitor.py (BCC exports programs from the
 * main source only), so a denial is written to the same ring buffer as the
 * syscall records (HOOK_NET_BLOCK) and shows up as kernel evidence.
 * Returning 0 makes connect()/sendmsg() fail with EPERM in the agent; TCP and
 * UDP, IPv4 and IPv6 all pass through here.
 *
 * The programs are attached once, as BPF links (multi-attach, detached when
 * the monitor's process lets go of them, however it ends), at the root of the
 * cgroup v2 hierarchy: a process of a run that left the run's cgroup (as root
 * it can write any `cgroup.procs`, or start a child elsewhere with
 * clone3(CLONE_INTO_CGROUP)) is still below it. The run is the caller's run
 * by lineage, its entry in `tasks` (monitor.c), or else its ancestor cgroup at
 * RUN_CGROUP_LEVEL in `run_cgroups` (a task the full `tasks` map could not
 * take); a task that is in no run of ours is not ours to police and passes.
 * A run's rules are `net_rules[slot]`, `net_runs[slot]`
 * says how many and the default (ebpf/monitor.py fills both before the run
 * starts).
 */

struct net_rule {
    u32 family;   /* 2 (AF_INET) or 10 (AF_INET6) */
    u32 proto;    /* 0 any, IPPROTO_TCP, IPPROTO_UDP */
    u32 proto_mask;  /* 0 when proto is 0 (any), else all ones */
    u32 port_lo;  /* host order */
    u32 port_hi;
    u32 addr[4];  /* network order, already masked */
    u32 mask[4];  /* network order */
};

/* A run's network policy: `enforce` 0 lets everything through. */
struct net_run {
    u32 enforce;
    u32 n_rules;
    u32 default_allow;
};

/* A denial's record: the header and a sockaddr_in6 image at most (28 bytes). */
struct net_block_rec {
    struct assay_hdr h;
    u8 data[28];
};

/* A run's rules, one element: looked up once, not once per rule inside the loop. */
struct net_rule_set {
    struct net_rule rule[NET_RULES_MAX];
};

BPF_ARRAY(net_rules, struct net_rule_set, RUN_SLOTS);
BPF_ARRAY(net_runs, struct net_run, RUN_SLOTS);

/* Nonzero unless `r` matches: every field folded into one value, tested once by the caller. */
static __always_inline u64 rule_misses(struct net_rule *r, u32 family, u32 proto, u32 port, u32 ip[4])
{
    u64 miss = r->family ^ family;
    miss |= (proto ^ r->proto) & r->proto_mask;
    miss |= ((u64)port - r->port_lo) >> 32;  /* port below the range: the difference wraps */
    miss |= ((u64)r->port_hi - port) >> 32;  /* port above it */
    for (int i = 0; i < 4; i++)
        miss |= (ip[i] & r->mask[i]) ^ r->addr[i];
    return miss;
}

#define ASSAY_AF_INET 2
#define ASSAY_AF_INET6 10

static __always_inline int net_decide(struct bpf_sock_addr *ctx, u32 family, u32 via)
{
    u32 run;
    struct task_t *t = tracked();
    if (t) {
        run = t->run;
    } else {
        u64 cg = bpf_get_current_ancestor_cgroup_id(RUN_CGROUP_LEVEL);
        u32 *runp = run_cgroups.lookup(&cg);
        if (!runp)
            return 1;
        run = *runp;
    }
    u32 slot = run % RUN_SLOTS;
    struct net_run *policy = net_runs.lookup(&slot);
    if (!policy || !policy->enforce)
        return 1;
    u32 n_rules = policy->n_rules;
    u32 ip[4] = {};
    if (family == ASSAY_AF_INET) {
        ip[0] = ctx->user_ip4;
    } else {
        ip[0] = ctx->user_ip6[0];
        ip[1] = ctx->user_ip6[1];
        ip[2] = ctx->user_ip6[2];
        ip[3] = ctx->user_ip6[3];
    }
    u32 port = __builtin_bswap16((u16)ctx->user_port);
    u32 proto = ctx->protocol;
    int allow = policy->default_allow;
    struct net_rule_set *rules = net_rules.lookup(&slot);
    for (u32 i = 0; rules && i < NET_RULES_MAX; i++) {
        /* `i` hidden from clang: it would merge the two exits into one on min(n_rules, 64), a
         * bound the verifier of Linux 6.1 cannot see ("The sequence of 8193 jumps is too
         * complex"); kept apart, the first exit is a constant the verifier walks to. */
        asm volatile("" : "+r"(i));
        if (i >= n_rules)
            break;
        if (!rule_misses(&rules->rule[i], family, proto, port, ip)) {
            allow = 1;
            break;
        }
    }
    if (allow)
        return 1;
    /* On this program's stack, not in the per-CPU scratch: a sock_addr program runs preemptible
     * (migration disabled only), so another task's syscall on this CPU could rewrite a shared
     * slot between the record's first field and its output. */
    struct net_block_rec rec = {};
    hdr_begin(&rec.h, HOOK_NET_BLOCK, -1 /* EPERM */, run);
    rec.h.a0 = via;
    rec.h.a1 = proto;
    /* a sockaddr_in / sockaddr_in6 image, decoded like connect()'s */
    u16 fam = family;
    u16 nport = (u16)ctx->user_port;
    __builtin_memcpy(rec.data, &fam, 2);
    __builtin_memcpy(rec.data + 2, &nport, 2);
    if (family == ASSAY_AF_INET) {
        __builtin_memcpy(rec.data + 4, &ip[0], 4);
        rec.h.data_len = 16;
        rec_output(&rec, sizeof(struct assay_hdr) + 16, HOOK_NET_BLOCK, run);
    } else {
        __builtin_memcpy(rec.data + 8, ip, 16);
        rec.h.data_len = 28;
        rec_output(&rec, sizeof(struct assay_hdr) + 28, HOOK_NET_BLOCK, run);
    }
    return 0;
}

int net_connect4(struct bpf_sock_addr *ctx) { return net_decide(ctx, ASSAY_AF_INET, HOOK_CONNECT); }
int net_connect6(struct bpf_sock_addr *ctx) { return net_decide(ctx, ASSAY_AF_INET6, HOOK_CONNECT); }
int net_sendmsg4(struct bpf_sock_addr *ctx) { return net_decide(ctx, ASSAY_AF_INET, HOOK_SENDMSG); }
int net_sendmsg6(struct bpf_sock_addr *ctx) { return net_decide(ctx, ASSAY_AF_INET6, HOOK_SENDMSG); }
