"""Abstract OpenFlow state: plain frozen, hashable dataclasses, no os-ken.

A switch's desired state is a set of ``FlowMod`` (command ``add``) and
``GroupMod`` (command ``add``); two states are diffed as sets. Changes are the
same classes with command ``modify``/``delete`` (always *strict*: one entry,
identified by table+priority+match, or by group id).

Field names and value formats are os-ken's OXM names (``eth_type`` int,
``ipv4_dst`` '10.0.0.1', ``eth_src`` '02:00:..', ``arp_op`` int) so the
shim translates without conversions. A match is a sorted tuple of
(field, value); an empty action tuple means drop.
"""

from dataclasses import dataclass, field

OFPP_IN_PORT = 0xFFFFFFF8
ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ARP_REQUEST, ARP_REPLY = 1, 2
# Every flow this controller installs carries this cookie ("fab" + version 1).
COOKIE = 0xFAB0000000000001


@dataclass(frozen=True)
class Output:
    port: int


@dataclass(frozen=True)
class Group:
    group_id: int


@dataclass(frozen=True)
class DecNwTtl:
    """Decrement the IPv4 TTL; OVS drops the packet when it reaches 0 (loop bound)."""


@dataclass(frozen=True)
class SetField:
    field: str
    value: object


@dataclass(frozen=True)
class CopyField:
    """Copy all n_bits of field src into field dst (OF1.5 copy_field)."""
    src: str
    dst: str
    n_bits: int


def match(**fields):
    """A canonical match: sorted tuple of (field, value)."""
    return tuple(sorted(fields.items()))


@dataclass(frozen=True)
class FlowMod:
    table: int
    priority: int
    match: tuple                      # sorted ((field, value), ...)
    actions: tuple = ()               # apply-actions; () = drop
    cookie: int = COOKIE
    command: str = "add"              # add | modify | delete (strict)

    @property
    def key(self):
        return (self.table, self.priority, self.match)

    def as_command(self, command):
        return FlowMod(self.table, self.priority, self.match, self.actions, self.cookie, command)


@dataclass(frozen=True)
class Bucket:
    actions: tuple
    weight: int = 1
    watch_port: int = None            # None = no liveness watch


@dataclass(frozen=True)
class Selection:
    """OVS's Netronome select-group property: hash these fields with basis."""
    fields: tuple                     # e.g. ('ipv4_src', 'ipv4_dst', 'udp_src', 'udp_dst')
    basis: int
    method: str = "hash"


@dataclass(frozen=True)
class GroupMod:
    group_id: int
    type: str                         # select | ff | indirect | all
    buckets: tuple = ()
    selection: Selection = None
    command: str = "add"              # add | modify | delete

    @property
    def key(self):
        return self.group_id

    def as_command(self, command):
        return GroupMod(self.group_id, self.type, self.buckets, self.selection, command)


@dataclass(frozen=True)
class SwitchState:
    """A switch's whole state: flows and groups, both as frozensets of adds."""
    flows: frozenset = field(default_factory=frozenset)
    groups: frozenset = field(default_factory=frozenset)
