"""The reachability check's ICMP echoes (pure, no root): checksum, request, reply parsing."""

import socket
import struct

from emulator.dataplane.observe import reach


def test_checksum_is_rfc1071():
    # type 8, code 0, checksum 0, id 1, seq 1: ~(0x0800 + 0x0001 + 0x0001)
    assert reach.checksum(struct.pack("!BBHHH", 8, 0, 0, 1, 1)) == 0xF7FD
    assert reach.checksum(b"\x01") == reach.checksum(b"\x01\x00")     # odd length pads
    packet = reach.echo_request(0x1234, 7)
    assert reach.checksum(packet) == 0                                # verifies as sent
    assert packet[:2] == b"\x08\x00" and struct.unpack("!HH", packet[4:8]) == (0x1234, 7)


def ipv4(src, payload, proto=1):
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0, 64, proto, 0,
                       socket.inet_aton(src), socket.inet_aton("10.0.0.1")) + payload


def test_replies_are_read_and_everything_else_ignored():
    reply = bytearray(reach.echo_request(0x1234, 7))
    reply[0] = 0                                   # echo reply
    assert reach.parse_reply(ipv4("10.0.0.9", bytes(reply))) == ("10.0.0.9", 0x1234, 7)
    assert reach.parse_reply(ipv4("10.0.0.9", reach.echo_request(1, 2))) is None  # request
    assert reach.parse_reply(b"\x60" + bytes(40)) is None                        # IPv6
    assert reach.parse_reply(ipv4("10.0.0.9", b"\x00\x00")) is None               # truncated


def test_large_fabrics_check_every_host_against_every_leaf():
    from emulator.fabric import addressing, presets
    from emulator.fabric.addressing import home_leaf
    small = addressing.plan(presets.build("leaf-spine", {"spines": "2", "leaves": "2",
                                                         "hosts_per_leaf": "2"}))
    pairs, how = reach.check_pairs(small)
    assert len(pairs) == 4 * 3 and how == "every host pair"
    big = addressing.plan(presets.build("leaf-spine", {"spines": "8", "leaves": "32",
                                                       "hosts_per_leaf": "8"}))
    pairs, how = reach.check_pairs(big)
    hosts = {h["name"]: home_leaf(h) for h in big["hosts"]}
    assert how == "every host to a host on every leaf"
    assert len(pairs) == 256 * 32 and len(set(pairs)) == len(pairs)
    assert all(a != b for a, b in pairs)
    assert {a for a, _ in pairs} == set(hosts) == {b for _, b in pairs}   # all send, all answer
    covered = {(hosts[a], hosts[b]) for a, b in pairs}
    leaves = set(hosts.values())
    assert covered == {(x, y) for x in leaves for y in leaves}           # every leaf pair


def test_pairs_go_in_waves_that_fit_the_neighbour_table():
    pairs = [(f"h{i}", f"h{j}") for i in range(256) for j in range(64) if i != j]
    assert reach.waves(pairs, room=1 << 20) == [sorted(pairs)]        # room for all: one
    parts = reach.waves(pairs, room=16383)
    assert sum(parts, []) == sorted(pairs)                            # each pair once, in order
    assert all(2 * len(w) <= 16383 // 2 for w in parts)               # entries fit half the room
    assert max(map(len, parts)) - min(map(len, parts)) <= 1           # waves of equal size
    assert all(len(w) >= 64 for w in reach.waves(pairs, room=0))      # a full table still moves


def neigh_msg(ifindex, dst, state, family=socket.AF_INET):
    body = reach._NDMSG.pack(family, ifindex, state, 0, 1) + struct.pack("=HH", 8, 1) + \
        socket.inet_aton(dst) + struct.pack("=HH", 10, 2) + b"\x02\x00\x00\x00\x00\x07\0\0"
    return reach.NLMSG.pack(16 + len(body), reach.RTM_NEWNEIGH, 2, 1, 0) + body


def test_neighbour_dump_and_delete_requests():
    done = reach.NLMSG.pack(20, reach.NLMSG_DONE, 2, 1, 0) + b"\0" * 4
    buf = neigh_msg(3, "10.0.0.7", 0x02) + neigh_msg(3, "10.0.0.9", reach.NUD_PERMANENT)
    assert reach.parse_neighbours(buf) == ([(3, socket.inet_aton("10.0.0.7"), 0x02),
                                            (3, socket.inet_aton("10.0.0.9"), 0x80)], False)
    assert reach.parse_neighbours(done) == ([], True)
    err = reach.NLMSG.pack(36, reach.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -1) + bytes(16)
    try:
        reach.parse_neighbours(err)
        raise AssertionError("a netlink error must raise")
    except OSError as e:
        assert e.errno == 1
    req = reach.delete_request(5, 3, socket.inet_aton("10.0.0.7"))
    length, mtype, flags, seq, _ = reach.NLMSG.unpack_from(req)
    assert (length, mtype, seq) == (len(req), reach.RTM_DELNEIGH, 5)
    assert flags == reach.NLM_F_REQUEST | reach.NLM_F_ACK
    assert reach._NDMSG.unpack_from(req, 16)[:2] == (socket.AF_INET, 3)
    assert req[-8:] == struct.pack("=HH", 8, 1) + socket.inet_aton("10.0.0.7")
