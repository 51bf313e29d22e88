"""The pause agent's reader of the switch ports' root shaper backlogs
(dataplane.lossless.pfc_agent), a few ports at a look."""

from emulator.dataplane.links.shaping import QdiscReader
from traffic.nic.netns import entered


class Backlogs:
    """The root shaper's backlog of every switch interface end, read a few ports at
    a look (``step``): one RTM_GETQDISC of a port's root each
    (``dataplane.links.shaping.QdiscReader.root``).  A dump of the namespace that holds
    the fabric's switches took 1-8 ms under an incast, and the pause loop waited
    for it: pauses came that much late and the headroom overflowed."""

    def __init__(self, ports):
        self.readers = {}
        self.ports, seen = [], {}                # (reader, ifindex, [key of each class])
        for p in ports:
            if p["kind"] != "switch":
                continue
            if p["netns"] not in self.readers:
                with entered(p["netns"]):
                    self.readers[p["netns"]] = QdiscReader()
            where = (p["netns"], p["ifindex"])
            if where not in seen:
                seen[where] = []
                self.ports.append((self.readers[p["netns"]], p["ifindex"], seen[where]))
            seen[where].append(p["key"])
        self.cursor = None                       # the next port of a read under way
        self.got = {}
        self.per_look = 2                        # the agent paces it (Agent.__init__)

    def start(self):
        """Begin a read of every port (unless one is under way)."""
        if self.cursor is None:
            self.cursor, self.got = 0, {}

    def step(self):
        """Read the next ports of the read under way: {key: backlog bytes} of every
        port once the last is read, else None."""
        if self.cursor is None:
            return None
        try:
            for reader, ifindex, keys in self.ports[self.cursor:self.cursor + self.per_look]:
                self.got.update(dict.fromkeys(keys, reader.root(ifindex)[0]))
        except OSError:                          # no answer: the next read starts over
            self.cursor = None
            raise
        self.cursor += self.per_look
        if self.cursor < len(self.ports):
            return None
        self.cursor = None
        return self.got
