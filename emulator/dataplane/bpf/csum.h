/* The IPv4 header checksum kept valid when a program rewrites a 16-bit word
 * of the header (the TOS byte's DSCP or ECN bits), updated incrementally:
 * HC' = ~(~HC + ~m + m') (RFC 1624 eqn 3), m the word before, m' after.  The
 * RoCEv2 ICRC masks the TOS byte (and the TTL), so it stays valid.
 */
#ifndef CSUM_H
#define CSUM_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* The checksum of ``ip`` (in line up to its checksum) after one of its 16-bit
 * words changed from ``m`` to ``m2`` (host order). */
static __always_inline void ipv4_csum_replace(struct iphdr *ip, __u64 m, __u64 m2)
{
	__u8 *b = (__u8 *)ip;
	__u64 sum;

	sum = ((((__u64)b[10] << 8) | b[11]) ^ 0xFFFF) + (m ^ 0xFFFF) + m2;
	sum = (sum & 0xFFFF) + (sum >> 16);     /* fold the carries */
	sum = (sum & 0xFFFF) + (sum >> 16);
	sum ^= 0xFFFF;
	b[10] = sum >> 8;
	b[11] = sum;
}

/* Set the TOS byte of ``ip`` (in line up to its checksum) to ``tos``. */
static __always_inline void ipv4_set_tos(struct iphdr *ip, __u8 tos)
{
	__u8 *b = (__u8 *)ip;
	__u64 m = ((__u64)b[0] << 8) | b[1];    /* version/IHL, TOS */

	b[1] = tos;
	ipv4_csum_replace(ip, m, ((__u64)b[0] << 8) | tos);
}

/* The same on ``skb`` (tc), whose IPv4 header follows its Ethernet header and
 * whose TOS byte is ``tos``: the kernel's helpers fix the checksum. */
static __always_inline void skb_set_tos(struct __sk_buff *skb, __u8 tos, __u8 new_tos)
{
	bpf_l3_csum_replace(skb, sizeof(struct ethhdr) + offsetof(struct iphdr, check),
			    bpf_htons(tos), bpf_htons(new_tos), 2);
	bpf_skb_store_bytes(skb, sizeof(struct ethhdr) + offsetof(struct iphdr, tos),
			    &new_tos, 1, 0);
}

#endif
