"""The links' per-flow counters (root): ``flows.bpf.c`` run by the kernel on crafted
frames (BPF_PROG_TEST_RUN) counts a RoCEv2 frame's bytes under (link, source,
destination), data and control frames apart, passes every frame on, and leaves
other frames uncounted; the run's map is read back as ``FlowCounters.read`` does."""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): no fabric
LAYOUT_INDEPENDENT = True

from emulator.dataplane import bpf
from emulator.dataplane.observe import flows
from traffic.roce.frames import FrameTemplate

TC_ACT_UNSPEC = 0xFFFFFFFF      # -1 as the kernel returns it: the next filter decides


def frame(src, dst, opcode="WRITE_ONLY", length=1078):
    return FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", src, dst, 0x100,
                         opcode=opcode, frame_len=length).raw


def test_the_flow_counter_counts_roce_data_and_control_per_link_and_pair():
    counters = flows.FlowCounters([("leaf1->spine1", (None, "x")),
                                   ("spine1->leaf2", (None, "y"))])
    counters.map = bpf.Map(flows.COUNT.size, 64, kind=bpf.maps.MAP_HASH,
                           key_size=flows.KEY.size)
    try:
        progs = [bpf.load("flows", flows.CONFIG.pack_fields(link=i), flows.CONFIG,
                          {flows.MAP: counters.map}, value_layouts=[flows.KEY, flows.COUNT])
                 for i in range(2)]
        try:
            data = frame("10.0.0.1", "10.0.0.5", length=1078)
            ack = frame("10.0.0.5", "10.0.0.1", opcode=0x11, length=60)   # an RC ACK
            for _ in range(3):
                rv, out, _ = bpf.test_run_skb(progs[0]["flows_in"], data)
                assert rv == TC_ACT_UNSPEC and out == data           # passed on unchanged
            bpf.test_run_skb(progs[0]["flows_in"], ack)
            bpf.test_run_skb(progs[1]["flows_in"], frame("10.0.0.2", "10.0.0.6",
                                                         length=2000))
            arp = bytes.fromhex("ffffffffffff020000000001" "0806") + bytes(46)
            rv, _, _ = bpf.test_run_skb(progs[1]["flows_in"], arp)
            assert rv == TC_ACT_UNSPEC
        finally:
            for p in progs:
                p.close()
        got = counters.read()
        assert got["leaf1->spine1"][("10.0.0.1", "10.0.0.5")] == flows.Count(3 * len(data), 3,
                                                                             0, 0)
        assert got["leaf1->spine1"][("10.0.0.5", "10.0.0.1")] == flows.Count(0, 0, len(ack), 1)
        assert got["spine1->leaf2"] == {("10.0.0.2", "10.0.0.6"): flows.Count(2000, 1, 0, 0)}
    finally:
        counters.remove()
