/* Packet trimming at a switch port's egress (dataplane.lossless.trim has the model):
 * a UET data frame that would find more than ``at`` bytes queued is cut to
 * ``size`` bytes (its headers and the probe its receiver reads), its IPv4 total
 * length and checksum and its UDP length fixed, its DSCP set to the trimmed one
 * (the ECN bits kept), and sent in the port's strict-priority class ahead of
 * data.  The UET frames carry UDP checksum 0 (traffic/uet/layout.py), which a
 * trim leaves valid.
 */
#ifndef TRIM_H
#define TRIM_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "csum.h"
#include "parse.h"

/* what user space sets per port (trim.CONFIG's ``trim.*``); at == 0: no trimming */
struct trim {
	__s64 at;               /* trim past this many bytes queued */
	__u64 size;             /* the frame's bytes after trimming */
	__u64 dscp;             /* the trimmed frame's DSCP */
	__u64 high;             /* skb->priority of the class ahead of data */
	__u64 small;            /* frames of at most this many bytes ride that class too */
};

#define TRIM_PULL (UET_PDS_OFF + 2)     /* up to the PDS prologue */
#define IP_OFF sizeof(struct ethhdr)
#define UDP_OFF (IP_OFF + sizeof(struct iphdr))

/* Trim the frame of ``skb`` (``len`` bytes) if the port's queue ``q`` and the
 * frame ask for it; returns the frame's length afterwards (``len`` if untouched),
 * or 0 if a helper failed (the frame goes on as it was).  Counts a trim in
 * ``*trims``. */
static __always_inline __u64 trim_step(struct __sk_buff *skb, __u64 len, __s64 q,
				       const volatile struct trim *t, __u64 *trims)
{
	__u16 old_tot, new_tot, new_udp;
	struct iphdr *ip;
	__u8 tos, new_tos;

	if (t->high && len <= t->small)
		skb->priority = t->high;        /* acknowledgements ahead of data */
	if (t->at <= 0 || len <= t->size || q + (__s64)len <= t->at)
		return len;
	if (bpf_skb_pull_data(skb, TRIM_PULL))
		return len;
	if (!parse_uet_request((void *)(long)skb->data, (void *)(long)skb->data_end))
		return len;
	ip = (void *)(long)skb->data + IP_OFF;
	if ((void *)(ip + 1) > (void *)(long)skb->data_end)
		return len;
	tos = ip->tos;
	old_tot = bpf_ntohs(ip->tot_len);
	if (bpf_skb_change_tail(skb, t->size, 0))
		return 0;
	new_tot = t->size - sizeof(struct ethhdr);
	new_udp = new_tot - sizeof(struct iphdr);
	bpf_l3_csum_replace(skb, IP_OFF + offsetof(struct iphdr, check), bpf_htons(old_tot),
			    bpf_htons(new_tot), 2);
	new_tot = bpf_htons(new_tot);
	bpf_skb_store_bytes(skb, IP_OFF + offsetof(struct iphdr, tot_len), &new_tot, 2, 0);
	new_udp = bpf_htons(new_udp);
	bpf_skb_store_bytes(skb, UDP_OFF + offsetof(struct udphdr, len), &new_udp, 2, 0);
	new_tos = (t->dscp << DSCP_SHIFT) | (tos & ECN_MASK);
	skb_set_tos(skb, tos, new_tos);
	if (t->high)
		skb->priority = t->high;
	__sync_fetch_and_add(trims, 1);
	return t->size;
}

#endif
