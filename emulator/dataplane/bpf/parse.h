/* The headers the programs read, and the one parse of them they share.
 *
 * A frame is Ethernet / IPv4 / UDP / RoCEv2 BTH, in line from ``data`` up to
 * ``data_end``.  A parse checks that every byte it hands out lies before
 * ``data_end`` before the first read, and returns NULL (or 0) otherwise or
 * when the frame is not what it parses.  A RoCEv2 frame is IPv4 without
 * options (version/IHL 0x45), so the UDP header and the BTH are at fixed
 * offsets; so is everything the programs read.
 */
#ifndef PARSE_H
#define PARSE_H

#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ROCE_PORT 4791          /* RoCEv2's UDP destination port */
#define DSCP_SHIFT 2            /* the TOS byte: DSCP << 2 | ECN */
#define ECN_MASK 3
#define BTH_OFF (sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct udphdr))

/* RoCEv2's Base Transport Header (IBA 9.2).  The ICRC masks ``resv8a``
 * (FECN, BECN and reserved bits), so a switch may write it. */
struct bth {
	__u8 opcode;
	__u8 flags;             /* SE, MigReq, PadCnt, TVer */
	__be16 pkey;
	__u8 resv8a;
	__u8 dqpn[3];
	__be32 psn;             /* AckReq, reserved, PSN */
} __attribute__((packed));

/* A RoCEv2 frame's headers, as parse_roce found them. */
struct roce {
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	struct bth *bth;        /* only its first ``bth_len`` bytes were checked */
};

/* The Ethernet header of the frame, or NULL if it is shorter. */
static __always_inline struct ethhdr *parse_eth(void *data, void *data_end)
{
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return NULL;
	return eth;
}

/* The IPv4 header of an IPv4 frame with its first ``ip_len`` bytes in line,
 * or NULL.  Only the EtherType is checked, not the version/IHL byte. */
static __always_inline struct iphdr *parse_ipv4(void *data, void *data_end, __u32 ip_len)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);

	if ((void *)ip + ip_len > data_end)
		return NULL;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return NULL;
	return ip;
}

/* Whether the frame is RoCEv2 (IPv4 without options, UDP to ROCE_PORT) with
 * its headers up to the UDP header and the first ``bth_len`` bytes of its BTH
 * in line; ``f`` holds them if so. */
static __always_inline int parse_roce(void *data, void *data_end, __u32 bth_len,
				      struct roce *f)
{
	f->eth = data;
	f->ip = data + sizeof(struct ethhdr);
	f->udp = (void *)(f->ip + 1);
	f->bth = data + BTH_OFF;
	if ((void *)f->bth + bth_len > data_end)
		return 0;
	return f->eth->h_proto == bpf_htons(ETH_P_IP) && *(__u8 *)f->ip == 0x45 &&
	       f->ip->protocol == IPPROTO_UDP && f->udp->dest == bpf_htons(ROCE_PORT);
}

#endif
