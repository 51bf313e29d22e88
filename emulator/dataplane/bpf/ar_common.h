/* The adaptive stage's shared state: what ar.bpf.c (Clos routes) and
 * ugal.bpf.c (a dragonfly's UGAL) both keep per tracked port and per flowlet,
 * in the run's maps (dataplane.adaptive: model.PORT_FIELDS, CONTROL_FIELDS).
 * The includer defines its own ``cfg`` and its route map.
 */
#ifndef AR_COMMON_H
#define AR_COMMON_H

#define ROCE_PORT 4791
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

/* The flow's hash (model.flow_hash is its Python twin). */
static __always_inline __u32 flow_hash(struct iphdr *ip, struct udphdr *udp)
{
	__u32 h = ip->saddr * 0x9E3779B1u;

	h ^= ip->daddr + 0x7F4A7C15u + (h << 6) + (h >> 2);
	h ^= ((__u32)udp->source << 16 | udp->dest) + 0x7F4A7C15u + (h << 6) + (h >> 2);
	h ^= h >> 16;
	h *= 0x85EBCA6Bu;
	h ^= h >> 13;
	return h;
}

#endif
