/* What ar.bpf.c (Clos routes) and ugal.bpf.c (a dragonfly's UGAL) share: the
 * state both keep per tracked port and per flowlet, in the run's maps
 * (dataplane.adaptive: model.PORT_FIELDS, CONTROL_FIELDS), and the steps of
 * their decisions that are the same.
 *
 * A tracked port's queue is counted from both sides of it: bytes in at its tc
 * egress (``enqueue``), bytes out at the link's far end XDP (``count_out``).
 * A deciding port parses a RoCEv2 frame (parse.h), looks its route up by this
 * switch and the IPv4 destination (``route``), and its flow's flowlet slot
 * (``flowlet``); it weighs each candidate's ``backlog`` (the queue, plus the
 * bytes decided towards it that have not reached its egress yet: Open vSwitch
 * forwards in batches), leaves the ports that are ``down_at`` the time, and
 * counts the choice (``count_decision``).  What it chooses among and how it
 * marks the choice is each program's own.  Each program defines its own
 * ``cfg`` and route map and hands their values to these functions.
 */
#ifndef AR_COMMON_H
#define AR_COMMON_H

#include <linux/bpf.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>

#define FLOWSETS 1024           /* flowlet slots per switch (power of 2) */

/* an entry per tracked switch port; user space reads it (adaptive.PORT) */
struct ar_port {
	__s64 in;               /* bytes into its egress queue (tc) */
	__s64 out;              /* bytes out at the link's far end (XDP) */
	__s64 sent;             /* bytes decided towards it */
	__s64 sent_in;          /* of them, bytes that reached its egress */
	__u64 sent_ns;          /* last decision towards it */
	__u64 load;             /* decaying sum of bytes into its queue */
	__u64 load_ns;          /* when ``load`` was last decayed */
	__u64 evac_ns;          /* first decision that skipped it while down */
	__u64 frames;           /* frames decided towards it */
	__u64 flowlets;         /* flowlets started on it */
	__u64 moved_in;         /* flowlets that left another port for it */
	__u64 moved_out;        /* flowlets that left it */
	__u64 hot;              /* its queue is at HOT_BAND or above (tc, with hysteresis) */
	__u64 hot_ns;           /* when it last turned hot */
	__u64 shun_ns;          /* first new flowlet placed elsewhere after hot_ns */
	__u64 react_sum;        /* sum, count, max of shun_ns - hot_ns */
	__u64 react_n;
	__u64 react_max;
	__u64 rescued;          /* frames decided towards it that reached its egress
	                         * after it was down and left by another candidate */
	/* constants, set by user space */
	__u64 mark;             /* DSCP that its output flow matches */
	__u64 frame;            /* a full frame's bytes: the queue bands' unit */
	__u64 half_ns;          /* the load's half-life */
	__u64 load_full;        /* the load's steady value at the port's rate */
	__s64 limit;            /* its TBF's byte limit */
	__u64 ifindex;          /* its interface (where a rescued frame is sent) */
};

/* an entry per tracked port, written by user space only (adaptive.CONTROL) */
struct ar_ctl {
	__u64 down;             /* its carrier is down (the detection model said so) */
	__u64 down_ns;          /* since when */
	__s64 corr;             /* bytes counted in that will never come out */
	__u64 late;             /* bytes decided towards it between the cut (the entry
	                         * written) and down_ns: the detection delay's loss */
};

struct ar_route_key {
	__u32 sw;
	__u32 dst;              /* IPv4 destination, network order */
};

struct ar_flowlet {
	__u64 last_ns;
	__u32 key;              /* the port entry it goes by */
	__u32 valid;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);        /* replaced by the run's map */
	__type(key, __u32);
	__type(value, struct ar_port);
} ar_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ar_ctl);
} ar_ctls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ar_flowlet);
} ar_flowlets SEC(".maps");

static __always_inline struct ar_port *port(__u32 key)
{
	return bpf_map_lookup_elem(&ar_ports, &key);
}

static __always_inline struct ar_ctl *ctl(__u32 key)
{
	return bpf_map_lookup_elem(&ar_ctls, &key);
}

/* The port entry ``key`` of a ``cfg`` field (-1: none), or NULL. */
static __always_inline struct ar_port *tracked(__s64 key)
{
	return key < 0 ? NULL : port(key);
}

/* Down from down_ns on: the detection model writes the entry at the cut with
 * the time its delay ends, so the switch acts at that time to the nanosecond,
 * however late the writer runs. */
static __always_inline int down_at(const struct ar_ctl *c, __u64 now)
{
	return c->down && now >= c->down_ns;
}

/* Bytes counted into the queue of ``p`` (control entry ``c``, if any) that
 * are still there. */
static __always_inline __s64 queued(const struct ar_port *p, const struct ar_ctl *c)
{
	return p->in - p->out - (c ? c->corr : 0);
}

/* Bytes queued at ``p`` or decided towards it in the last ``pend_ns`` and
 * not at its egress yet; at least 0. */
static __always_inline __s64 backlog(const struct ar_port *p, const struct ar_ctl *c,
				     __u64 now, __u64 pend_ns)
{
	__s64 q = queued(p, c);

	if (now - p->sent_ns < pend_ns && p->sent > p->sent_in)
		q += p->sent - p->sent_in;
	return q > 0 ? q : 0;
}

/* The link's far end received ``len`` bytes from the tracked port ``up``
 * (NULL: none): out of its queue. */
static __always_inline void count_out(struct ar_port *up, __u64 len)
{
	if (up)
		__sync_fetch_and_add(&up->out, len);
}

/* A frame of ``len`` bytes enters the egress queue of ``p``, which holds
 * ``before`` bytes: counted in (1), or dropped by the TBF's limit (0). */
static __always_inline int enqueue(struct ar_port *p, __s64 before, __u64 len)
{
	if (before + (__s64)len > p->limit)
		return 0;
	__sync_fetch_and_add(&p->in, len);
	return 1;
}

/* The entry of ``routes`` (a hash map keyed by struct ar_route_key) of switch
 * ``sw`` towards IPv4 destination ``dst``, or NULL. */
static __always_inline void *route(void *routes, __u32 sw, __u32 dst)
{
	struct ar_route_key rk = {.sw = sw, .dst = dst};

	return bpf_map_lookup_elem(routes, &rk);
}

/* ``len`` bytes decided towards ``p`` at ``now``. */
static __always_inline void count_decision(struct ar_port *p, __u64 len, __u64 now)
{
	__sync_fetch_and_add(&p->sent, len);
	__sync_fetch_and_add(&p->frames, 1);
	p->sent_ns = now;
}

/* The flow's hash (model.flow_hash is its Python twin). */
static __always_inline __u32 flow_hash(const struct iphdr *ip, const struct udphdr *udp)
{
	__u32 h = ip->saddr * 0x9E3779B1u;

	h ^= ip->daddr + 0x7F4A7C15u + (h << 6) + (h >> 2);
	h ^= ((__u32)udp->source << 16 | udp->dest) + 0x7F4A7C15u + (h << 6) + (h >> 2);
	h ^= h >> 16;
	h *= 0x85EBCA6Bu;
	h ^= h >> 13;
	return h;
}

/* The flowlet slot of the frame's flow at switch ``sw``, or NULL. */
static __always_inline struct ar_flowlet *flowlet(__u32 sw, const struct iphdr *ip,
						  const struct udphdr *udp)
{
	__u32 slot = sw * FLOWSETS + (flow_hash(ip, udp) & (FLOWSETS - 1));

	return bpf_map_lookup_elem(&ar_flowlets, &slot);
}

#endif
