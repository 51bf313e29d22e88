// SPDX-License-Identifier: GPL-2.0
/* A link's bytes per flow, counted where they arrive (dataplane.observe.flows has
 * the model).
 *
 * flows_in  tc clsact ingress of a link's far end: a RoCEv2 frame that crossed
 *           the link is counted under (the link, its IPv4 source, its IPv4
 *           destination), its data (RDMA WRITE ...) and its control frames
 *           (ACK/NAK, CNP) apart.  It passes every frame on unchanged
 *           (TC_ACT_UNSPEC: the next filter, if any, decides).
 *
 * One object per link end: ``cfg.link`` is the link's number; the map is the
 * run's own hash map (user space creates it and reads it at the end).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "parse.h"

#define TC_ACT_UNSPEC (-1)
#define OP_ACKNOWLEDGE 0x11     /* RC ACKNOWLEDGE (and NAK) */
#define OP_CNP 0x81
#define OPCODE_LEN 1            /* the BTH's first byte: its opcode */

struct flow_key {
	__u32 link;
	__u32 saddr;            /* network order, as on the wire */
	__u32 daddr;
};

struct flow_count {
	__u64 data_bytes;       /* frame bytes, Ethernet header included */
	__u64 data_frames;
	__u64 control_bytes;
	__u64 control_frames;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);        /* replaced by the run's map */
	__type(key, struct flow_key);
	__type(value, struct flow_count);
} flow_counts SEC(".maps");

/* set by user space before load (flows.CONFIG) */
struct flows_cfg {
	__u64 link;             /* the link this end receives from */
};

const volatile struct flows_cfg cfg = {};

SEC("tc")
int flows_in(struct __sk_buff *skb)
{
	__u64 len = skb->len;
	struct flow_count *c, zero = {};
	struct flow_key key = {};
	struct roce f;
	void *data, *data_end;

	if (len < BTH_OFF + OPCODE_LEN || bpf_skb_pull_data(skb, BTH_OFF + OPCODE_LEN))
		return TC_ACT_UNSPEC;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (!parse_roce(data, data_end, OPCODE_LEN, &f))
		return TC_ACT_UNSPEC;
	key.link = cfg.link;
	key.saddr = f.ip->saddr;
	key.daddr = f.ip->daddr;
	c = bpf_map_lookup_elem(&flow_counts, &key);
	if (!c) {
		bpf_map_update_elem(&flow_counts, &key, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&flow_counts, &key);
		if (!c)
			return TC_ACT_UNSPEC;   /* the map is full: the frame goes uncounted */
	}
	if (f.bth->opcode == OP_ACKNOWLEDGE || f.bth->opcode == OP_CNP) {
		__sync_fetch_and_add(&c->control_bytes, len);
		__sync_fetch_and_add(&c->control_frames, 1);
	} else {
		__sync_fetch_and_add(&c->data_bytes, len);
		__sync_fetch_and_add(&c->data_frames, 1);
	}
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
