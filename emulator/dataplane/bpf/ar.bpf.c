// SPDX-License-Identifier: GPL-2.0
/* Adaptive routing in the switch's data plane: dynamic load balancing per
 * flowlet and per packet (dataplane.adaptive has the model and the names).
 *
 * ar_ingress  XDP (generic mode) on an interface end.  As the far end of a
 *             tracked switch port (``cfg.up_key``): counts the frame out of
 *             that port's queue.  As a deciding switch port (``cfg.decide``):
 *             drops a frame whose source address is a group address (invalid,
 *             as a bridge drops it: the stage's marks carry that bit), and
 *             picks the egress of a RoCEv2 frame of the decided class among
 *             its route's live candidates (``ar_routes``) by their quality,
 *             per flowlet (``ar_flowlets``) or per packet, and marks the frame:
 *             the choice in the IPv4 DSCP bits (the port's ``mark``) and the
 *             group bit of the source address (``STAGE_BIT``), which an
 *             OpenFlow flow matches to output there.  ECN bits are kept and
 *             the header checksum fixed; the ICRC masks the TOS byte and does
 *             not cover the Ethernet header.
 * ar_egress   tc clsact egress of a tracked switch port: counts the frame into
 *             the port's queue (unless the TBF's limit drops it) and its recent
 *             load; a frame the stage marked (``STAGE_BIT``) is restored to the
 *             class's DSCP and its source address, and, if it carries this
 *             port's mark, counted as arrived (no longer pending).  Only the
 *             stage's frames are touched: a host's own DSCP, even one equal to
 *             a mark, leaves as it came.  Once the port is
 *             down (from the modelled detection on), a frame carrying its mark
 *             is rescued: decided again among its route's live candidates and
 *             redirected to the best one's egress.  Such a frame was decided
 *             before the port died and held in Open vSwitch's backlog since (an
 *             ASIC decides as the frame leaves its ingress pipeline, so it would
 *             have been decided after the detection).
 *
 * Quality of a port: its queue (bytes in - bytes out, plus the bytes decided
 * towards it that have not reached its egress yet: Open vSwitch forwards in
 * batches) in log-2 bands of frames, and its recent load (a decaying sum of the
 * bytes it sent) in eighths of its rate; the worse of the two is the band.
 * The best band wins; ties go to the least loaded.  A flowlet keeps its port
 * until it idles for the flowlet timer, its port dies, or its port's queue
 * reaches band ``move_band`` while another candidate's queue is MOVE_GAP bands
 * shorter (the ASIC's reassignment on member quality; it may reorder).  Per packet, the shortest
 * queue wins (DRILL), ties again to the least loaded.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "ar_common.h"
#include "csum.h"
#include "parse.h"

#define MAX_CAND 8
#define BANDS 7                 /* bands 0..7 */
#define HOT_BAND 3              /* a queue of 4+ frames: building (hot) */
#define MODE_FLOWLET 1
#define MODE_PACKET 2
#define MOVE_GAP 3              /* a live flowlet moves to a port 3+ bands better */
#define STAGE_BIT 0x01          /* source address byte 0: the group bit (I/G) */

struct ar_route {
	__u32 n;
	__u32 keys[MAX_CAND];   /* candidate ports' entries */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct ar_route_key);
	__type(value, struct ar_route);
} ar_routes SEC(".maps");

/* set by user space before load (adaptive.CONFIG) */
struct ar_cfg {
	__u64 sw;               /* this switch's number (routes, flowlet slots) */
	__s64 up_key;           /* the tracked port this end receives from; -1: none */
	__u64 decide;           /* 1: decide the frames arriving here */
	__u64 mode;             /* MODE_FLOWLET or MODE_PACKET */
	__u64 dscp;             /* the class decided (and restored at egress) */
	__u64 flowlet_ns;       /* flowlet inactivity timer */
	__u64 pend_ns;          /* decided bytes older than this no longer count */
	__s64 key;              /* tc: this port's entry; -1: none */
	__u64 move_band;        /* a live flowlet whose port reaches this band may move; 0: never */
};

const volatile struct ar_cfg cfg = {};

/* Whether the port of entry ``key`` is down at ``now`` (an unknown one is not). */
static __always_inline int is_down(__u32 key, __u64 now)
{
	struct ar_ctl *c = ctl(key);

	return c && down_at(c, now);
}

/* The load's half-life at ``p`` (at least 1 ns). */
static __always_inline __u64 half_life(const struct ar_port *p)
{
	return p->half_ns ? p->half_ns : 1;
}

/* The half-lives that passed at ``p`` from load_ns to ``now``. */
static __always_inline __u64 halvings(const struct ar_port *p, __u64 now)
{
	return now > p->load_ns ? (now - p->load_ns) / half_life(p) : 0;
}

/* The decaying load of ``p`` at ``now`` (halved every half_ns). */
static __always_inline __u64 load_at(const struct ar_port *p, __u64 now)
{
	__u64 shift = halvings(p, now);

	return shift >= 63 ? 0 : p->load >> shift;
}

/* The queue's band: the bit length of its size in frames, at most BANDS
 * (band 1 from one frame queued, 2 from two, 3 from four ... 7 from 64). */
static __always_inline __u64 queue_band(__s64 q, __u64 frame)
{
	__u64 n = q > 0 ? (__u64)q / (frame ? frame : 1) : 0, band = 0;

	for (int i = 0; i < BANDS && n; i++) {
		band++;
		n >>= 1;
	}
	return band;
}

/* The band of the queue at ``p`` (entry ``key``): what moves a live flowlet. */
static __always_inline __u64 backlog_band(const struct ar_port *p, __u32 key, __u64 now)
{
	return queue_band(backlog(p, ctl(key), now, cfg.pend_ns), p->frame);
}

/* A port's quality band: the worse of its queue's and its load's. */
static __always_inline __u64 band(const struct ar_port *p, const struct ar_ctl *c, __u64 now)
{
	__u64 full = p->load_full ? p->load_full : 1;
	__u64 qb = queue_band(backlog(p, c, now, cfg.pend_ns), p->frame);
	__u64 lb = load_at(p, now) * 8 / full;

	if (lb > BANDS)
		lb = BANDS;
	return lb > qb ? lb : qb;
}

/* Lower is better.  Per flowlet: (band << 56) | load.  Per packet (DRILL's
 * shortest local queue): (bytes queued << 24) | load / 256. */
static __always_inline __u64 quality(const struct ar_port *p, const struct ar_ctl *c,
				     __u64 now)
{
	__u64 load = load_at(p, now);
	__s64 q = backlog(p, c, now, cfg.pend_ns);
	__u64 qb;

	if (cfg.mode == MODE_PACKET) {
		if (q > (1LL << 39) - 1)
			q = (1LL << 39) - 1;
		load >>= 8;
		if (load > (1ULL << 24) - 1)
			load = (1ULL << 24) - 1;
		return ((__u64)q << 24) | load;
	}
	qb = band(p, c, now);
	if (load > (1ULL << 56) - 1)
		load = (1ULL << 56) - 1;
	return (qb << 56) | load;
}

/* The TOS byte ``tos`` with its DSCP set to ``dscp`` (ECN kept). */
static __always_inline __u8 with_dscp(__u8 tos, __u8 dscp)
{
	return (dscp << DSCP_SHIFT) | (tos & ECN_MASK);
}

/* The best live candidate of ``r`` at ``now`` (its entry), or -1; a candidate
 * down since the last decision gets its evac_ns. */
static __noinline __s64 best(struct ar_route *r, __u64 now, __u64 *best_q)
{
	__s64 choice = -1;
	__u64 bq = ~0ULL;

	for (__u32 i = 0; i < MAX_CAND; i++) {
		struct ar_port *p;
		struct ar_ctl *c;
		__u64 q;

		if (i >= r->n)
			break;
		p = port(r->keys[i]);
		c = ctl(r->keys[i]);
		if (!p || !c)
			continue;
		if (down_at(c, now)) {
			if (p->evac_ns < c->down_ns)
				p->evac_ns = now;
			continue;
		}
		q = quality(p, c, now);
		if (q < bq) {
			bq = q;
			choice = r->keys[i];
		}
	}
	*best_q = bq;
	return choice;
}

/* A new flowlet leaves by ``chosen``: ports of ``r`` in a hot episode that it
 * avoided record their reaction time. */
static __noinline void shun(struct ar_route *r, __s64 chosen, __u64 now)
{
	for (__u32 i = 0; i < MAX_CAND; i++) {
		struct ar_port *p;

		if (i >= r->n)
			break;
		if (r->keys[i] == chosen)
			continue;
		p = port(r->keys[i]);
		if (!p || !p->hot || p->shun_ns >= p->hot_ns)
			continue;
		p->shun_ns = now;
		__sync_fetch_and_add(&p->react_sum, now - p->hot_ns);
		__sync_fetch_and_add(&p->react_n, 1);
		if (now - p->hot_ns > p->react_max)
			p->react_max = now - p->hot_ns;
	}
}

static __always_inline int is_candidate(struct ar_route *r, __u32 key)
{
	for (__u32 i = 0; i < MAX_CAND; i++) {
		if (i >= r->n)
			break;
		if (r->keys[i] == key)
			return 1;
	}
	return 0;
}

static __always_inline void decide(struct xdp_md *ctx, __u64 len)
{
	struct ar_flowlet *fl = NULL;
	struct ar_route *r;
	struct ar_port *p, *old;
	struct ar_ctl *c;
	__u64 now, bq, cur;
	__s64 choice = -1;
	struct roce f;

	if (!parse_roce((void *)(long)ctx->data, (void *)(long)ctx->data_end, 0, &f) ||
	    (f.ip->tos >> DSCP_SHIFT) != cfg.dscp)
		return;
	r = route(&ar_routes, cfg.sw, f.ip->daddr);
	if (!r)
		return;
	now = bpf_ktime_get_ns();
	if (cfg.mode == MODE_FLOWLET) {
		fl = flowlet(cfg.sw, f.ip, f.udp);
		if (!fl)
			return;
		if (fl->valid && now - fl->last_ns < cfg.flowlet_ns && is_candidate(r, fl->key) &&
		    !is_down(fl->key, now)) {
			choice = fl->key;
			if (!cfg.move_band)
				goto send;
			p = port(choice);
			if (!p)
				return;
			/* its own load never moves it (a flow at line rate would chase
			 * itself round the uplinks): its port's queue does */
			cur = backlog_band(p, choice, now);
			if (cur < cfg.move_band)
				goto send;
			choice = best(r, now, &bq);
			p = choice < 0 ? NULL : port(choice);
			if (!p || backlog_band(p, choice, now) + MOVE_GAP > cur) {
				choice = fl->key;
				goto send;
			}
		}
	}
	if (choice < 0)
		choice = best(r, now, &bq);
	if (choice < 0)
		return;                 /* every candidate down: the route's own choice */
	if (fl) {
		p = port(choice);
		if (!p)
			return;
		__sync_fetch_and_add(&p->flowlets, 1);
		if (fl->valid && fl->key != choice && is_candidate(r, fl->key)) {
			old = port(fl->key);
			__sync_fetch_and_add(&p->moved_in, 1);
			if (old)
				__sync_fetch_and_add(&old->moved_out, 1);
		}
		shun(r, choice, now);
		fl->key = choice;
		fl->valid = 1;
	}
send:
	if (fl)
		fl->last_ns = now;
	p = port(choice);
	if (!p)
		return;
	count_decision(p, len, now);
	c = ctl(choice);
	if (c && c->down)               /* cut, not yet detected */
		__sync_fetch_and_add(&c->late, len);
	ipv4_set_tos(f.ip, with_dscp(f.ip->tos, p->mark));
	f.eth->h_source[0] |= STAGE_BIT;
}

SEC("xdp")
int ar_ingress(struct xdp_md *ctx)
{
	__u64 len = bpf_xdp_get_buff_len(ctx);

	count_out(tracked(cfg.up_key), len);
	if (cfg.decide) {
		struct ethhdr *eth = parse_eth((void *)(long)ctx->data,
					       (void *)(long)ctx->data_end);

		if (eth && (eth->h_source[0] & STAGE_BIT))
			return XDP_DROP;        /* no valid frame has it: only the stage's may */
		decide(ctx, len);
	}
	return XDP_PASS;
}

#define IP_END (sizeof(struct ethhdr) + sizeof(struct iphdr))
#define SRC_OFF 6               /* the source address's first byte */

/* A frame decided towards the dead port ``p`` reached its egress: decide it
 * again among the route to ``daddr``'s live candidates and hand it to the
 * best one's egress (TC_ACT_REDIRECT), or leave it to be lost (-1). */
static __noinline int rescue(struct __sk_buff *skb, struct ar_port *p, __u32 daddr,
			     __u8 tos, __u64 now)
{
	struct ar_route *r = route(&ar_routes, cfg.sw, daddr);
	struct ar_port *np;
	__u64 len = skb->len, bq;
	__s64 choice;

	if (!r)
		return -1;
	choice = best(r, now, &bq);
	if (choice < 0 || choice == cfg.key)
		return -1;
	np = port(choice);
	if (!np || !np->ifindex)
		return -1;
	skb_set_tos(skb, tos, with_dscp(tos, np->mark));
	__sync_fetch_and_add(&p->sent_in, len);          /* reached this egress: not lost here */
	__sync_fetch_and_add(&p->rescued, 1);
	count_decision(np, len, now);
	return bpf_redirect(np->ifindex, 0);
}

SEC("tc")
int ar_egress(struct __sk_buff *skb)
{
	__u64 len = skb->len, now = bpf_ktime_get_ns(), half, shift, b;
	struct ar_port *p = tracked(cfg.key);
	struct iphdr *ip;
	__s64 before;
	__u8 tos;

	if (!p)
		return TC_ACT_UNSPEC;
	/* the restore first: a frame the TBF drops was still decided */
	if (len >= IP_END && !bpf_skb_pull_data(skb, IP_END)) {
		void *data = (void *)(long)skb->data;
		struct ethhdr *eth = parse_eth(data, (void *)(long)skb->data_end);

		ip = parse_ipv4(data, (void *)(long)skb->data_end, sizeof(struct iphdr));
		if (eth && ip && (eth->h_source[0] & STAGE_BIT)) {
			__u8 src0 = eth->h_source[0] & ~STAGE_BIT;

			tos = ip->tos;
			if ((tos >> DSCP_SHIFT) == p->mark && is_down(cfg.key, now)) {
				/* (the rescued frame keeps the stage's marks: the
				 * new port's egress restores it) */
				int ret = rescue(skb, p, ip->daddr, tos, now);

				if (ret >= 0)
					return ret;
			}
			if ((tos >> DSCP_SHIFT) == p->mark)
				__sync_fetch_and_add(&p->sent_in, len);
			/* any mark leaves as the class: one decided towards another
			 * port (its flow gone) took the route's way out */
			skb_set_tos(skb, tos, with_dscp(tos, cfg.dscp));
			bpf_skb_store_bytes(skb, SRC_OFF, &src0, 1, 0);
		}
	}
	before = queued(p, ctl(cfg.key));
	if (!enqueue(p, before, len))
		return TC_ACT_UNSPEC;           /* the TBF drops it */
	half = half_life(p);
	shift = halvings(p, now);
	if (shift >= 63) {
		p->load = 0;
		p->load_ns = now;
	} else if (shift) {
		p->load >>= shift;
		p->load_ns += shift * half;
	}
	__sync_fetch_and_add(&p->load, len);
	b = queue_band(before + len, p->frame);
	if (b >= HOT_BAND && !p->hot) {
		p->hot = 1;
		p->hot_ns = now;
	} else if (b + 2 <= HOT_BAND && p->hot) {
		p->hot = 0;
	}
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
