"""nftables: the run's ``netdev`` tables (gray loss, corruption, ECN marking).

Every call runs ``nft`` in the network namespace at path ``netns`` (None:
this one), checked, with a timeout.  A table is replaced whole by one
``apply`` (one transaction: never half-written).
"""

import json
import shutil

from emulator.dataplane.system.proc import in_netns, run


def available():
    """True if the ``nft`` tool is installed."""
    return shutil.which("nft") is not None


def apply(netns, script, timeout=10):
    """Run the nftables ``script`` (``nft -f -``) as one transaction."""
    return run(in_netns(netns, ["nft", "-f", "-"]), input=script, timeout=timeout)


def delete_table(netns, table, family="netdev", timeout=10, check=True):
    return run(in_netns(netns, ["nft", "delete", "table", family, table]), timeout=timeout,
               check=check)


def table(netns, name, family="netdev", timeout=20):
    """The table's JSON document (``nft -j list table``)."""
    return json.loads(run(in_netns(netns, ["nft", "-j", "list", "table", family, name]),
                          timeout=timeout))


def tables(family="netdev", timeout=20):
    """``nft list tables FAMILY``: one ``table FAMILY NAME`` line each."""
    return run(["nft", "list", "tables", family], timeout=timeout).splitlines()
