"""A NIC's send queues: one FIFO per QP, served round-robin (pure: no sockets, no clock).

Model.  A RoCE NIC keeps a send queue per QP and arbitrates among the QPs
that have work, a packet (or a burst) at a time, so a QP held back by its
rate limiter (DCQCN, TIMELY) waits alone while the others go on, and a QP
that failed is flushed (its work requests complete in error).  Within a QP
the order is the order the packets were posted (the PSN order).

``SendQueues.take`` serves one packet per QP in turn: the QP just served
goes to the back of the line.  ``admit(qp, packet)`` says whether the QP's
rate lets that packet go now (and accounts for it if so); ``usable(qp)``
whether the QP still works.
"""

from collections import OrderedDict, deque


class SendQueues:
    def __init__(self, key):
        self.key = key                 # packet -> its QP
        self.q = OrderedDict()         # QP -> deque of packets; the front QP goes next
        self.n = 0
        self.flushed = 0               # packets of failed QPs dropped unsent

    def __len__(self):
        return self.n

    def extend(self, packets):
        for p in packets:
            k = self.key(p)
            d = self.q.get(k)
            if d is None:
                d = self.q[k] = deque()
            d.append(p)
            self.n += 1

    def take(self, limit, admit=None, usable=None):
        """Up to ``limit`` packets, one per QP in turn, in each QP's order."""
        out, q = [], self.q
        held = 0                       # QPs in a row whose rate held them back
        while len(out) < limit and held < len(q):
            k, d = next(iter(q.items()))
            if usable is not None and not usable(k):
                self.n -= len(d)
                self.flushed += len(d)
                del q[k]
                continue
            if admit is not None and not admit(k, d[0]):
                q.move_to_end(k)
                held += 1
                continue
            out.append(d.popleft())
            self.n -= 1
            held = 0
            if d:
                q.move_to_end(k)
            else:
                del q[k]
        return out
