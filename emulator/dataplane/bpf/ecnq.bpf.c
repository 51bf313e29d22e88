// SPDX-License-Identifier: GPL-2.0
/* ECN marking at dequeue (dataplane.lossless.ecnq has the model): a switch
 * port's TBF queue is counted from both sides of it, and the frame that leaves
 * is marked by the queue it leaves behind.
 *
 * ecnq_in   tc clsact egress of the switch port, before its TBF: counts the
 *           frame in, unless the TBF's byte limit will drop it.
 * ecnq_out  XDP (generic mode) on the link's far end: counts the frame out and
 *           marks it (ecn_mark.h).
 *
 * One object per port: ``cfg`` holds the port's entry and thresholds, and the
 * map is the run's own (user space creates it and hands it over at load).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "chain.h"
#include "ecn_mark.h"

/* an entry per switch port; user space reads it (ecnq.ENTRY) */
struct ecnq_entry {
	__u64 in_bytes;         /* counted into the TBF */
	__u64 out_bytes;        /* counted out at the far end */
	__u64 marks;            /* frames marked CE */
	__u64 spare;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);        /* replaced by the run's map */
	__type(key, __u32);
	__type(value, struct ecnq_entry);
} ecnq_queues SEC(".maps");

/* set by user space before load (ecnq.CONFIG) */
struct ecnq_cfg {
	__u64 index;            /* this port's entry */
	__s64 limit;            /* the TBF's byte limit */
	struct red red;
};

const volatile struct ecnq_cfg cfg = {};

#define TC_ACT_OK 0

SEC("tc")
int ecnq_in(struct __sk_buff *skb)
{
	__u32 key = cfg.index;
	__u64 len = skb->len;
	struct ecnq_entry *e = bpf_map_lookup_elem(&ecnq_queues, &key);

	if (!e)
		return TC_ACT_OK;
	/* the TBF drops it: it never leaves */
	if ((__s64)(e->in_bytes - e->out_bytes + len) > cfg.limit)
		return TC_ACT_OK;
	__sync_fetch_and_add(&e->in_bytes, len);
	return TC_ACT_OK;
}

SEC("xdp")
int ecnq_out(struct xdp_md *ctx)
{
	__u32 key = cfg.index;
	__u64 len = bpf_xdp_get_buff_len(ctx);
	struct ecnq_entry *e = bpf_map_lookup_elem(&ecnq_queues, &key);

	if (!e)
		return pass_on(ctx, cfg.index);
	__sync_fetch_and_add(&e->out_bytes, len);
	mark_tail(ctx, len, e->in_bytes - e->out_bytes, &cfg.red, &e->marks);
	return pass_on(ctx, cfg.index);
}

char LICENSE[] SEC("license") = "GPL";
