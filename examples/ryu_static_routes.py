"""A classic Ryu app (OpenFlow 1.3): static shortest-path routes + proxy ARP.

Written for Ryu -- ``from ryu...`` imports, ``app_manager.RyuApp`` -- and run
unchanged on os-ken by the project's launcher:

    sudo .venv/bin/python -m emulator run --controller app:examples/ryu_static_routes.py

Model.  The fabric is read from the topology document whose path is in the
environment variable FABRIC_TOPOLOGY (docs/topology-schema.md), so nothing is
learned by flooding (a Clos fabric has loops).  When a switch connects:

* ARP requests go to the controller (priority 200), which answers them with
  the target host's MAC (proxy ARP: no ARP ever crosses the fabric);
* one IPv4 route per host address (priority 100): out of the host port on
  the host's own switch, else towards the host's switch along a shortest path
  (breadth-first search over switch-to-switch links).  Where several next hops
  are equally short, the destination's index picks one: static, so a cut link
  is NOT repaired -- which is what ``emulator check --cut`` shows.

No ECMP groups, no failover: a deliberately small app to start from.
"""

import json
import os
from collections import deque

from ryu.base import app_manager
from ryu.controller import ofp_event
from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from ryu.lib.packet import arp, ethernet, ether_types, packet
from ryu.ofproto import ofproto_v1_3


def load_topology():
    with open(os.environ["FABRIC_TOPOLOGY"], encoding="utf-8") as f:
        return json.load(f)


def next_hops(topo):
    """{switch name: {dst switch name: [ports on a shortest path, in port order]}}."""
    links = {sw["name"]: [(p["port"], p["peer"]) for p in sw["ports"]
                          if p["peer_kind"] != "host"] for sw in topo["switches"]}
    result = {}
    for dst in links:
        dist = {dst: 0}
        queue = deque([dst])
        while queue:                       # BFS from the destination switch
            node = queue.popleft()
            for _, peer in links[node]:
                if peer not in dist:
                    dist[peer] = dist[node] + 1
                    queue.append(peer)
        for src in links:
            if src != dst and src in dist:
                result.setdefault(src, {})[dst] = sorted(
                    port for port, peer in links[src] if dist.get(peer) == dist[src] - 1)
    return result


class StaticRoutes(app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super(StaticRoutes, self).__init__(*args, **kwargs)
        self.topo = load_topology()
        self.hops = next_hops(self.topo)
        self.by_dpid = {sw["dpid"]: sw for sw in self.topo["switches"]}
        self.mac_of = {p["ip"]: p["mac"] for h in self.topo["hosts"] for p in h["ports"]}
        self.logger.info("static routes for %d switches, %d hosts",
                         len(self.by_dpid), len(self.mac_of))

    def add_flow(self, dp, priority, match, actions):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        dp.send_msg(parser.OFPFlowMod(datapath=dp, priority=priority, match=match,
                                      instructions=inst))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features_handler(self, ev):
        dp = ev.msg.datapath
        parser, ofp = dp.ofproto_parser, dp.ofproto
        sw = self.by_dpid.get(dp.id)
        if sw is None:
            self.logger.warning("switch %016x is not in the topology", dp.id)
            return
        self.add_flow(dp, 200, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_ARP, arp_op=1),
                      [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])
        n = 0
        for i, h in enumerate(self.topo["hosts"]):
            for p in h["ports"]:
                if p["switch"] == sw["name"]:
                    port = p["switch_port"]
                else:
                    choices = self.hops[sw["name"]].get(p["switch"])
                    if not choices:
                        continue
                    port = choices[i % len(choices)]
                self.add_flow(dp, 100, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP,
                                                       ipv4_dst=p["ip"]),
                              [parser.OFPActionOutput(port)])
                n += 1
        self.logger.info("%s: %d routes installed", sw["name"], n)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in_handler(self, ev):
        msg = ev.msg
        dp = msg.datapath
        pkt = packet.Packet(msg.data)
        req = pkt.get_protocol(arp.arp)
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        mac = self.mac_of.get(req.dst_ip)
        if mac is None:
            return                           # not a host of the fabric: no answer
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(ethertype=ether_types.ETH_TYPE_ARP,
                                             dst=req.src_mac, src=mac))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=mac, src_ip=req.dst_ip,
                                   dst_mac=req.src_mac, dst_ip=req.src_ip))
        reply.serialize()
        parser, ofp = dp.ofproto_parser, dp.ofproto
        in_port = msg.match["in_port"]
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=ofp.OFP_NO_BUFFER,
                                        in_port=ofp.OFPP_CONTROLLER,
                                        actions=[parser.OFPActionOutput(in_port)],
                                        data=reply.data))
