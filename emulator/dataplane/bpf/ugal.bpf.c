// SPDX-License-Identifier: GPL-2.0
/* UGAL on a dragonfly: the source router's per-flowlet choice between the
 * minimal route and a Valiant candidate, from live queue depth
 * (dataplane.adaptive.ugal has the model and the names).
 *
 * ugal_ingress  XDP (generic mode) on an interface end.  As the far end of a
 *               tracked switch port (``cfg.up_key``): counts the frame out of
 *               that port's queue.  As a host-facing port of a router
 *               (``cfg.decide``): for a RoCEv2 frame to another group
 *               (``ugal_routes``), per flowlet (``ar_flowlets``), draws an
 *               intermediate group among the route's candidates and compares
 *               the minimal route's queue q_min with that candidate's q_nonmin
 *               (BookSim's rule): q_min > 2 q_nonmin + bias sends the flowlet
 *               non-minimally, by stamping the Ethernet source address with
 *               the candidate group's phase-1 carrier (02:df:00:<k>:01), which
 *               the controller's Valiant flows match; otherwise the frame is
 *               left to the minimal flows.  Which ports' queues the table names
 *               is the model's choice (UGAL-G: the group's global links, every
 *               switch's map being one kernel's; UGAL-L: the router's own).
 * ugal_egress   tc clsact egress of a tracked switch port: counts the frame into
 *               its queue (unless the TBF's limit drops it) and, unless it is in
 *               a Valiant route's second phase, as a decision that arrived.
 *
 * A queue is bytes in (tc egress) - bytes out (the link's far end XDP), plus
 * the bytes decided towards it in the last ``pend_ns`` that have not reached
 * its egress yet (Open vSwitch forwards in batches).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "ar_common.h"
#include "parse.h"

#define MIN_CAND 4
#define UGAL_CAND 16
#define QUEUE_DOWN (1LL << 40)  /* the queue of a dead port: never chosen */

/* a router's route to a host of another group (ugal.ROUTE) */
struct ugal_route {
	__u32 n_min;                    /* the minimal route's queues */
	__u32 n;                        /* Valiant candidates */
	__u32 min_keys[MIN_CAND];
	__u32 keys[UGAL_CAND];          /* candidate i's queue (its first global hop) */
	__u32 groups[UGAL_CAND];        /* candidate i's intermediate group */
};

/* decisions of one router (ugal.COUNT) */
struct ugal_count {
	__u64 min_frames;
	__u64 min_bytes;
	__u64 min_flowlets;
	__u64 non_frames;
	__u64 non_bytes;
	__u64 non_flowlets;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct ar_route_key);
	__type(value, struct ugal_route);
} ugal_routes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ugal_count);
} ugal_counts SEC(".maps");

/* set by user space before load (ugal.CONFIG) */
struct ugal_cfg {
	__u64 sw;               /* this switch's number (routes, flowlet slots, counts) */
	__s64 up_key;           /* the tracked port this end receives from; -1: none */
	__u64 decide;           /* 1: decide the frames arriving here */
	__u64 flowlet_ns;       /* flowlet inactivity timer */
	__u64 pend_ns;          /* decided bytes older than this no longer count */
	__s64 key;              /* tc: this port's entry; -1: none */
	__s64 bias;             /* bytes: q_min > 2 q_nonmin + bias goes non-minimal */
};

const volatile struct ugal_cfg cfg = {};

/* Bytes queued at entry ``key`` or decided towards it and on their way;
 * QUEUE_DOWN if its port is dead or unknown. */
static __always_inline __s64 queue(__u32 key, __u64 now)
{
	struct ar_port *p = port(key);
	struct ar_ctl *c = ctl(key);

	if (!p || !c || down_at(c, now))
		return QUEUE_DOWN;
	return backlog(p, c, now, cfg.pend_ns);
}

/* The minimal route's queue: the shortest of its queues, and its entry. */
static __noinline __s64 min_queue(struct ugal_route *r, __u64 now, __u32 *which)
{
	__s64 best = QUEUE_DOWN, q;

	*which = r->min_keys[0];
	for (__u32 i = 0; i < MIN_CAND; i++) {
		if (i >= r->n_min)
			break;
		q = queue(r->min_keys[i], now);
		if (q < best) {
			best = q;
			*which = r->min_keys[i];
		}
	}
	return best;
}

/* The Valiant carrier of group ``k``, phase 1, as the frame's source address. */
static __always_inline void stamp(struct ethhdr *eth, __u32 k)
{
	eth->h_source[0] = 0x02;
	eth->h_source[1] = 0xdf;
	eth->h_source[2] = 0x00;
	eth->h_source[3] = (k >> 8) & 0xff;
	eth->h_source[4] = k & 0xff;
	eth->h_source[5] = 0x01;
}

static __always_inline void decide(struct xdp_md *ctx, __u64 len)
{
	struct ar_flowlet *fl;
	struct ugal_route *r;
	struct ugal_count *cnt;
	struct ar_port *p;
	__u32 sw = cfg.sw, mkey = 0, choice = 0, i;
	__s64 qmin, qnon;
	struct roce f;
	__u64 now;
	int fresh = 0;

	if (!parse_roce((void *)(long)ctx->data, (void *)(long)ctx->data_end, 0, &f))
		return;
	r = route(&ugal_routes, sw, f.ip->daddr);
	cnt = bpf_map_lookup_elem(&ugal_counts, &sw);
	if (!r || !cnt)
		return;                 /* a host of its own group: minimal */
	now = bpf_ktime_get_ns();
	fl = flowlet(sw, f.ip, f.udp);
	if (!fl)
		return;
	qmin = min_queue(r, now, &mkey);
	if (fl->valid && now - fl->last_ns < cfg.flowlet_ns && fl->key <= r->n &&
	    fl->key <= UGAL_CAND) {
		choice = fl->key;       /* the flowlet keeps its path */
		if (choice) {
			i = (choice - 1) & (UGAL_CAND - 1);
			if (queue(r->keys[i], now) >= QUEUE_DOWN)
				choice = 0;     /* its candidate died: minimal */
		}
	} else if (r->n) {
		fresh = 1;
		i = bpf_get_prandom_u32() % r->n;
		i &= UGAL_CAND - 1;
		qnon = queue(r->keys[i], now);
		if (qnon < QUEUE_DOWN && qmin > 2 * qnon + cfg.bias)
			choice = i + 1;
	} else {
		fresh = 1;
	}
	fl->key = choice;
	fl->valid = 1;
	fl->last_ns = now;
	if (choice) {
		i = (choice - 1) & (UGAL_CAND - 1);
		p = port(r->keys[i]);
		stamp(f.eth, r->groups[i]);
		__sync_fetch_and_add(&cnt->non_frames, 1);
		__sync_fetch_and_add(&cnt->non_bytes, len);
		if (fresh)
			__sync_fetch_and_add(&cnt->non_flowlets, 1);
	} else {
		p = port(mkey);
		__sync_fetch_and_add(&cnt->min_frames, 1);
		__sync_fetch_and_add(&cnt->min_bytes, len);
		if (fresh)
			__sync_fetch_and_add(&cnt->min_flowlets, 1);
	}
	if (p) {
		count_decision(p, len, now);
		if (fresh)
			__sync_fetch_and_add(&p->flowlets, 1);
	}
}

SEC("xdp")
int ugal_ingress(struct xdp_md *ctx)
{
	__u64 len = bpf_xdp_get_buff_len(ctx);

	count_out(tracked(cfg.up_key), len);
	if (cfg.decide)
		decide(ctx, len);
	return XDP_PASS;
}

SEC("tc")
int ugal_egress(struct __sk_buff *skb)
{
	__u64 len = skb->len;
	struct ar_port *p = tracked(cfg.key);
	struct ethhdr *eth;
	struct ar_ctl *c;

	if (!p)
		return TC_ACT_UNSPEC;
	c = ctl(cfg.key);
	if (!c)
		return TC_ACT_UNSPEC;
	if (!enqueue(p, queued(p, c), len))
		return TC_ACT_UNSPEC;           /* the TBF drops it */
	if (len < sizeof(struct ethhdr) || bpf_skb_pull_data(skb, sizeof(struct ethhdr)))
		return TC_ACT_UNSPEC;
	eth = parse_eth((void *)(long)skb->data, (void *)(long)skb->data_end);
	/* a frame in its Valiant route's second phase was decided elsewhere */
	if (eth && eth->h_proto == bpf_htons(ETH_P_IP) &&
	    !(eth->h_source[0] == 0x02 && eth->h_source[1] == 0xdf &&
	      eth->h_source[2] == 0x00 && eth->h_source[5] == 0x02))
		__sync_fetch_and_add(&p->sent_in, len);
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
