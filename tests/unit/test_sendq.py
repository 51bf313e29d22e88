"""The NIC's per-QP send queues: round-robin across QPs, order within a QP, a QP
held back by its rate waiting alone, a failed QP flushed."""

from traffic.nic.sendq import SendQueues


def packets(qp, n):
    return [(qp, i) for i in range(n)]


def test_qps_are_served_in_turn_and_each_in_its_order():
    q = SendQueues(lambda p: p[0])
    q.extend(packets("a", 3) + packets("b", 2) + packets("c", 1))
    assert len(q) == 6
    assert q.take(4) == [("a", 0), ("b", 0), ("c", 0), ("a", 1)]
    assert q.take(10) == [("b", 1), ("a", 2)]
    assert len(q) == 0 and q.take(5) == []


def test_a_qp_its_rate_holds_back_does_not_block_the_others():
    q = SendQueues(lambda p: p[0])
    q.extend(packets("slow", 4) + packets("fast", 3))
    got = q.take(10, admit=lambda qp, p: qp != "slow")
    assert got == packets("fast", 3) and len(q) == 4
    charged = []

    def one_each(qp, p):          # the rate admits one packet, then it must wait
        if qp in charged:
            return False
        charged.append(qp)
        return True
    assert q.take(10, admit=one_each) == [("slow", 0)]
    assert q.take(10) == [("slow", 1), ("slow", 2), ("slow", 3)]   # order kept


def test_a_failed_qp_is_flushed():
    q = SendQueues(lambda p: p[0])
    q.extend(packets("dead", 5) + packets("ok", 2))
    assert q.take(10, usable=lambda qp: qp != "dead") == packets("ok", 2)
    assert len(q) == 0 and q.flushed == 5
