/* ECN marking at dequeue by DCQCN's RED profile, shared by ecnq.bpf.c and
 * pfc.bpf.c: a frame that leaves ``q`` bytes queued behind it is marked CE
 * never at or below Kmin, always above Kmax, and between them with probability
 * Pmax (q - Kmin) / (Kmax - Kmin); Kmin == Kmax is a step at K.  Only
 * ECN-capable IPv4 frames longer than ``min_len`` are marked.  The IPv4 header
 * checksum is updated incrementally (RFC 1624); the RoCEv2 ICRC masks the TOS
 * byte, so it stays valid.
 */
#ifndef ECN_MARK_H
#define ECN_MARK_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define PSCALE (1 << 16)        /* marking probability in 1/65536ths */
#define ECN_MASK 3              /* the TOS byte's ECN field */
#define ECN_CE 3

/* The RED profile as user space computes it: pmul = max(1, round(Pmax * PSCALE)). */
struct red {
	__s64 kmin;
	__s64 kmax;
	__u64 pmul;
	__u64 min_len;
};

/* TOS |= CE, and the checksum fixed: HC' = ~(~HC + ~m + m') (RFC 1624 eqn 3),
 * m the header's first 16-bit word (version/IHL, TOS) before, m' after. */
static __always_inline void set_ce(struct iphdr *ip)
{
	__u8 *b = (__u8 *)ip;
	__u64 m = ((__u64)b[0] << 8) | b[1];
	__u64 tos = b[1] | ECN_CE;
	__u64 sum;

	b[1] = tos;
	sum = ((((__u64)b[10] << 8) | b[11]) ^ 0xFFFF) + (m ^ 0xFFFF)
	      + (((__u64)b[0] << 8) | tos);
	sum = (sum & 0xFFFF) + (sum >> 16);     /* fold the carries */
	sum = (sum & 0xFFFF) + (sum >> 16);
	sum ^= 0xFFFF;
	b[10] = sum >> 8;
	b[11] = sum;
}

/* Mark the frame of ``ctx`` (``len`` bytes) CE by the queue ``q`` it leaves
 * behind and count the mark in ``*marks``; leave it as it is otherwise. */
static __always_inline void mark_tail(struct xdp_md *ctx, __u64 len, __s64 q,
				      const volatile struct red *red, __u64 *marks)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__s64 kmin = red->kmin, kmax = red->kmax;

	if (q <= kmin || len <= red->min_len)
		return;
	/* up to the header checksum: the version/IHL byte is not checked */
	if ((void *)&ip->check + sizeof(ip->check) > data_end)
		return;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return;
	if ((ip->tos & ECN_MASK) == 0 || (ip->tos & ECN_MASK) == ECN_CE)
		return;
	if (kmax > kmin && q <= kmax) {
		/* rand/65536 >= Pmax (q - Kmin)/(Kmax - Kmin): not this one */
		__u64 draw = (__u64)(bpf_get_prandom_u32() & (PSCALE - 1)) * (__u64)(kmax - kmin);

		if (draw >= (__u64)(q - kmin) * red->pmul)
			return;
	}
	set_ce(ip);
	__sync_fetch_and_add(marks, 1);
}

#endif
