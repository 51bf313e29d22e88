/* The next XDP program on an interface, when another feature's stage follows
 * (adaptive routing after PFC or dequeue ECN marking): a frame this program
 * passes is handed on by a tail call through ``next_xdp``, a program array of
 * the run (one slot per interface end, the program's own key); an empty slot
 * passes the frame as before.
 */
#ifndef CHAIN_H
#define CHAIN_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);        /* replaced by the run's program array */
	__type(key, __u32);
	__type(value, __u32);
} next_xdp SEC(".maps");

static __always_inline int pass_on(struct xdp_md *ctx, __u32 slot)
{
	bpf_tail_call(ctx, &next_xdp, slot);
	return XDP_PASS;
}

#endif
