"""Failover drills (``python -m emulator drill``): being written."""

from emulator.errors import FabricError


def add_arguments(p):
    """Options of the ``drill`` subcommand (the fabric options are added already)."""


def main(fabric, args, out=print):
    raise FabricError("drill is not available yet")
