/* ECN marking at dequeue by DCQCN's RED profile, shared by ecnq.bpf.c and
 * pfc.bpf.c: a frame that leaves ``q`` bytes queued behind it is marked CE
 * never at or below Kmin, always above Kmax, and between them with probability
 * Pmax (q - Kmin) / (Kmax - Kmin); Kmin == Kmax is a step at K.  Only
 * ECN-capable IPv4 frames longer than ``min_len`` are marked, their header
 * checksum kept valid (csum.h).
 */
#ifndef ECN_MARK_H
#define ECN_MARK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "csum.h"
#include "parse.h"

#define PSCALE (1 << 16)        /* marking probability in 1/65536ths */
#define ECN_CE 3                /* the ECN field (ECN_MASK) of a CE frame */

/* The RED profile as user space computes it: pmul = max(1, round(Pmax * PSCALE)). */
struct red {
	__s64 kmin;
	__s64 kmax;
	__u64 pmul;
	__u64 min_len;
};

/* Mark the frame of ``ctx`` (``len`` bytes) CE by the queue ``q`` it leaves
 * behind and count the mark in ``*marks``; leave it as it is otherwise. */
static __always_inline void mark_tail(struct xdp_md *ctx, __u64 len, __s64 q,
				      const volatile struct red *red, __u64 *marks)
{
	__s64 kmin = red->kmin, kmax = red->kmax;
	struct iphdr *ip;

	if (q <= kmin || len <= red->min_len)
		return;
	/* in line up to its checksum: what the marking reads and writes */
	ip = parse_ipv4((void *)(long)ctx->data, (void *)(long)ctx->data_end,
			offsetof(struct iphdr, check) + sizeof(ip->check));
	if (!ip)
		return;
	if ((ip->tos & ECN_MASK) == 0 || (ip->tos & ECN_MASK) == ECN_CE)
		return;
	if (kmax > kmin && q <= kmax) {
		/* rand/65536 >= Pmax (q - Kmin)/(Kmax - Kmin): not this one */
		__u64 draw = (__u64)(bpf_get_prandom_u32() & (PSCALE - 1)) * (__u64)(kmax - kmin);

		if (draw >= (__u64)(q - kmin) * red->pmul)
			return;
	}
	ipv4_set_tos(ip, ip->tos | ECN_CE);
	__sync_fetch_and_add(marks, 1);
}

#endif
