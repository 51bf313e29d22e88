"""The reachability check's ICMP echoes (pure, no root): checksum, request, reply parsing."""

import socket
import struct

from emulator.dataplane import reach


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
