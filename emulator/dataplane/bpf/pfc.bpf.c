// SPDX-License-Identifier: GPL-2.0
/* Priority flow control's classes and per-ingress buffer accounting
 * (dataplane.lossless.pfc has the model and the names).
 *
 * pfc_egress   tc clsact egress of an interface end: sets the frame's class
 *              (skb->priority); counts a lossless frame into this end's queue
 *              and, at a switch, as queued for the port it came in by (the
 *              stamp byte names it).
 * pfc_ingress  XDP (generic mode) on an interface end, the far end of egress
 *              ``up_key``: takes an arriving lossless frame off that queue and
 *              off the buffer of the port it entered that switch by; drops it
 *              if the watchdog drops that queue.  At a switch: counts it into
 *              this port's buffer or drops it past the limit (an ingress drop),
 *              notes the time it crosses xoff, and stamps it with this port; at
 *              a host: clears the stamp.  Optionally marks it CE by the queue it
 *              leaves behind (ecn_mark.h).  Kick frames are dropped.
 *
 * One object per interface end: ``cfg`` holds its keys; the map is the run's
 * own (user space creates it, F_MMAPABLE for the pause agent).
 *
 * Lossless priorities: with ``classes`` > 1 (a dragonfly: one per routing
 * phase) the map holds ``classes`` blocks of ``nends`` entries, block c for
 * priority c's queues and buffers, and the stamp byte is split: bits 0-4 the
 * port number + 1, bits 5-6 the priority the frame came in by, bit 7 set by
 * the egress of a port that starts a new phase (``phase``: a global link)
 * when it moved the frame to the next priority.  The frame crosses the link
 * in that priority, and the far end counts it there.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "chain.h"
#include "ecn_mark.h"
#include "parse.h"

#define TC_ACT_OK 0
#define KICK_ETHERTYPE 0x88B5     /* IEEE local experimental: the pause gate's kick */
#define OP_ACKNOWLEDGE 0x11       /* RC ACKNOWLEDGE (and NAK) */
#define OP_CNP 0x81
#define CONTROL_MAX 256           /* frames up to this ride the control class */
#define CLASS_CONTROL 0x100010    /* HTB classes 10:10, 10:20, 10:30 */
#define CLASS_LOSSLESS 0x100020
#define CLASS_BEST 0x100030
#define FLAG_DROP 1               /* the watchdog drops this egress queue's lossless frames */
#define PORT_MASK 0x1f            /* the stamp's port with several classes */
#define NEXT_PHASE 0x80           /* the stamp's bit: moved to the next class on this link */

/* an entry per interface end; user space reads it as pfc.E_* (the agent by mmap) */
struct pfc_entry {
	__s64 eg_in;            /* bytes into this end's lossless egress queue */
	__s64 eg_out;           /* of them, bytes that reached the far end */
	__s64 ing;              /* bytes that came in by this (switch) port, in its buffer */
	__s64 xoff;             /* thresholds, set by user space */
	__s64 limit;
	__s64 cross_ns;         /* when the buffer last crossed xoff */
	__s64 last_ns;          /* when the far end last received from this queue */
	__s64 flags;            /* FLAG_DROP */
	__s64 ing_drops;
	__s64 wd_drops;
	__s64 peak;
	__s64 marks;
	__s64 pauses;           /* the agent's, as are paused_ns, corr, late */
	__s64 paused_ns;
	__s64 queued;           /* of ing, bytes waiting in the switch's egress queues */
	__s64 corr;
	__s64 late;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);        /* replaced by the run's map */
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pfc_entry);
} pfc_ends SEC(".maps");

/* set by user space before load (pfc.CONFIG) */
struct pfc_cfg {
	__u64 key;              /* this interface end's entry */
	__s64 base;             /* its switch's first entry; -1: a host */
	__u64 up_key;           /* the egress this end receives from */
	__s64 up_base;          /* that one's switch's first entry; -1: a host */
	__u64 stamp;            /* this port's number + 1 at a switch; 0 at a host */
	__u64 ecn;              /* mark CE at dequeue by ``red`` */
	__u64 nends;            /* entries per class */
	__u64 classes;          /* lossless priorities: 1, or one per routing phase */
	__u64 phase;            /* this end's egress starts a new routing phase */
	__u64 dscp;             /* the lossless class's DSCP: other RoCE data is best effort */
	struct red red;
};

const volatile struct pfc_cfg cfg = {};

/* The stamp, the switch port the frame came in by, is the BTH's resv8a byte
 * (the ICRC masks it): a frame's class needs the BTH up to it in line. */
#define STAMP_LEN (offsetof(struct bth, resv8a) + 1)
#define STAMP_END (BTH_OFF + STAMP_LEN)                 /* 47 */

enum roce_class { NOT_ROCE, CONTROL, LOSSLESS, BEST_EFFORT };

/* The class of an IPv4 RoCEv2 frame (with its stamp byte in line, ``f`` its
 * headers), or NOT_ROCE: ACK/NAK and CNP ride the control class, data of the
 * lossless DSCP the lossless class, data of any other DSCP best effort. */
static __always_inline enum roce_class roce_class(void *data, void *data_end, struct roce *f)
{
	if (!parse_roce(data, data_end, STAMP_LEN, f))
		return NOT_ROCE;
	if (f->bth->opcode == OP_ACKNOWLEDGE || f->bth->opcode == OP_CNP)
		return CONTROL;
	if ((f->ip->tos >> DSCP_SHIFT) != cfg.dscp)
		return BEST_EFFORT;
	return LOSSLESS;
}

/* interface end ``key``'s entry of lossless class ``cls`` */
static __always_inline struct pfc_entry *entry(__u32 cls, __u32 key)
{
	__u32 index = cls * cfg.nends + key;

	return bpf_map_lookup_elem(&pfc_ends, &index);
}

static __always_inline __u32 stamp_port(__u8 stamp)
{
	return cfg.classes > 1 ? stamp & PORT_MASK : stamp;
}

/* the class a stamped frame came in by at the switch that stamped it */
static __always_inline __u32 stamp_class(__u8 stamp)
{
	return cfg.classes > 1 ? (stamp >> 5) & 3 : 0;
}

/* the class it crosses the link in (its egress may have moved it on) */
static __always_inline __u32 link_class(__u8 stamp)
{
	return cfg.classes > 1 ? stamp_class(stamp) + (stamp >> 7) : 0;
}

/* The entry of the port a frame stamped ``stamp`` came in by, at the switch
 * whose first entry is ``base``, in the class it came in by; none for an
 * unstamped frame or a host. */
static __always_inline struct pfc_entry *ingress_port(__s64 base, __u8 stamp)
{
	if (base < 0 || !stamp_port(stamp))
		return NULL;
	return entry(stamp_class(stamp), stamp_port(stamp) + base - 1);
}

SEC("tc")
int pfc_egress(struct __sk_buff *skb)
{
	__u64 len = skb->len;
	struct pfc_entry *e, *in;
	enum roce_class class = NOT_ROCE;
	struct roce f;
	__u32 cls;
	__u8 stamp;

	/* frames from a packet socket carry only their Ethernet header in line */
	if (len >= STAMP_END && !bpf_skb_pull_data(skb, STAMP_END))
		class = roce_class((void *)(long)skb->data, (void *)(long)skb->data_end, &f);
	if (class == NOT_ROCE) {
		skb->priority = len > CONTROL_MAX ? CLASS_BEST : CLASS_CONTROL;
		return TC_ACT_OK;
	}
	if (class == CONTROL) {
		skb->priority = CLASS_CONTROL;
		return TC_ACT_OK;
	}
	if (class == BEST_EFFORT) {
		skb->priority = CLASS_BEST;
		return TC_ACT_OK;
	}
	stamp = f.bth->resv8a;
	cls = stamp_class(stamp);
	if (cfg.phase && cls + 1 < cfg.classes) {       /* the next routing phase */
		__u8 moved = stamp | NEXT_PHASE;

		if (bpf_skb_store_bytes(skb, STAMP_END - 1, &moved, 1, 0))
			return TC_ACT_OK;
		cls++;
	}
	skb->priority = CLASS_LOSSLESS + cls;
	e = entry(cls, cfg.key);
	if (!e)
		return TC_ACT_OK;
	__sync_fetch_and_add(&e->eg_in, len);
	in = ingress_port(cfg.base, stamp);
	if (in)
		__sync_fetch_and_add(&in->queued, len);
	return TC_ACT_OK;
}

SEC("xdp")
int pfc_ingress(struct xdp_md *ctx)
{
	__u64 len = bpf_xdp_get_buff_len(ctx);
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = parse_eth(data, data_end);
	struct pfc_entry *up, *in, *own;
	__s64 occupancy, before;
	struct roce f;
	__u32 cls;

	if (!eth)
		return pass_on(ctx, cfg.key);
	if (eth->h_proto == bpf_htons(KICK_ETHERTYPE))
		return XDP_DROP;
	if (roce_class(data, data_end, &f) != LOSSLESS)
		return pass_on(ctx, cfg.key);
	cls = link_class(f.bth->resv8a);
	up = entry(cls, cfg.up_key);
	if (!up)
		return pass_on(ctx, cfg.key);
	__sync_fetch_and_add(&up->eg_out, len);
	up->last_ns = bpf_ktime_get_ns();
	in = ingress_port(cfg.up_base, f.bth->resv8a);
	if (in) {
		__sync_fetch_and_add(&in->ing, -len);
		__sync_fetch_and_add(&in->queued, -len);
	}
	if (up->flags & FLAG_DROP) {
		__sync_fetch_and_add(&up->wd_drops, 1);
		return XDP_DROP;
	}
	if (cfg.stamp) {
		own = entry(cls, cfg.key);
		if (!own)
			return pass_on(ctx, cfg.key);
		/* signed: a count off by a lost frame may dip below 0 */
		occupancy = own->ing - own->corr + len;
		if (occupancy > own->limit) {
			__sync_fetch_and_add(&own->ing_drops, 1);
			return XDP_DROP;
		}
		if (occupancy > own->peak)
			own->peak = occupancy;
		before = __sync_fetch_and_add(&own->ing, len) - own->corr;
		if (before < own->xoff && (__s64)(before + len) >= own->xoff)
			own->cross_ns = bpf_ktime_get_ns();     /* this frame crossed xoff */
	}
	f.bth->resv8a = cfg.stamp && cfg.classes > 1 ? cfg.stamp | cls << 5 : cfg.stamp;
	if (cfg.ecn)
		mark_tail(ctx, len, up->eg_in - up->eg_out, &cfg.red, (__u64 *)&up->marks);
	return pass_on(ctx, cfg.key);
}

char LICENSE[] SEC("license") = "GPL";
