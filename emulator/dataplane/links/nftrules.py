"""The nftables rules of gray failures: random loss and payload corruption on a
switch port's egress, in the namespace that holds the port."""


def loss_rule(percent):
    """The nftables rule dropping ``percent`` % of frames (0.01 % steps; 100 drops all)."""
    return f"{_chance(percent)}counter drop"


def _chance(percent):
    """The nftables match of a random ``percent`` % of frames ('' for all of them).

    ``numgen random mod N < K`` needs K < N, so 100 % matches every frame."""
    basis_points = round(percent * 100)
    return "" if basis_points >= 10000 else f"numgen random mod 10000 < {basis_points} "


# the 48th byte after the UDP header: RoCEv2 payload (after the 12-byte BTH, and a
# RETH), covered by the ICRC and by nothing the switches check
CORRUPT_BIT = 48 * 8


def corrupt_rule(percent):
    """The nftables rule flipping bits of one payload byte in ``percent`` % of the
    RoCEv2 frames: delivered, but the ICRC fails, so the receiving NIC drops it."""
    return (f"udp dport 4791 {_chance(percent)}@th,{CORRUPT_BIT},8 set "
            f"@th,{CORRUPT_BIT},8 ^ 0x5a counter")
