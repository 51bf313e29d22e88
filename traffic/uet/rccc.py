"""RCCC, receiver-credit congestion control: the target grants its link's rate (pure).

Model (UE Specification 1.0.1 §3.6, receiver-credit congestion control, as this
lab reads it).  An incast's senders cannot know how many others aim at the same
receiver; the receiver can.  So:

- a sender starts with ``initial`` bytes of credit (one BDP: the first round trip
  goes unsolicited) and afterwards sends only what it was granted; every request
  it sends carries its *credit target* (RUD_CC_REQ): the bytes it still has to
  send beyond its credit;
- the receiver's ``Scheduler`` hands out credit at its link's rate (a token
  bucket, ``share`` of the line), a ``quantum`` at a time, round-robin over the
  senders whose target is not yet covered; a grant rides the next ACK to that
  sender (ACK_CC with the credit CC state), or a CONTROL CREDIT packet once a
  sender is owed ``quantum`` bytes.

So the receiver's link is never offered much more than its rate, whatever the
number of senders, and each gets an equal share.
"""

from collections import OrderedDict


class Scheduler:
    """The receiving NIC's credit pacer over its senders (keys are opaque)."""

    def __init__(self, line_bps, mtu, now=0, share=0.98, quantum_mtus=2):
        self.rate = line_bps / 8 * share / 1e9          # bytes per ns
        self.quantum = quantum_mtus * mtu
        self.depth = 2 * self.quantum
        self.tokens, self.last = self.depth, now
        self.wanting = OrderedDict()                     # key -> bytes not yet granted
        self.owed = {}                                   # key -> granted, not yet sent
        self.granted = 0

    def demand(self, key, target):
        """Sender ``key`` says it still wants ``target`` bytes of credit."""
        if target > 0:
            self.wanting[key] = target
        else:
            self.wanting.pop(key, None)

    def poll(self, now):
        """Grant what the bucket holds, round-robin; returns the keys owed a quantum."""
        self.tokens = min(self.depth, self.tokens + (now - self.last) * self.rate)
        self.last = now
        ready = []
        while self.wanting and self.tokens >= self.quantum:
            key, want = next(iter(self.wanting.items()))
            g = min(self.quantum, want)
            self.tokens -= g
            self.granted += g
            self.owed[key] = self.owed.get(key, 0) + g
            if want - g > 0:
                self.wanting[key] = want - g
                self.wanting.move_to_end(key)
            else:
                del self.wanting[key]
            if self.owed[key] >= self.quantum and key not in ready:
                ready.append(key)
        return ready

    def take(self, key):
        """The credit owed to ``key``, now handed over (0 if none)."""
        return self.owed.pop(key, 0)

    def next_ns(self, now):
        """When the next quantum is in the bucket (ns), or None when nobody wants one."""
        if not self.wanting:
            return None
        need = self.quantum - self.tokens
        return now if need <= 0 else now + int(need / self.rate) + 1


class Credit:
    """A sender PDC's credit balance."""

    def __init__(self, initial):
        self.balance = initial
        self.received = 0

    def can_send(self, size):
        return self.balance >= size

    def sent(self, size):
        self.balance -= size

    def grant(self, amount):
        self.balance += amount
        self.received += amount
