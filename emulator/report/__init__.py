"""Presentation: result documents to text, tables, pictures and report.md.

``summary`` prints a run (the fabric, traffic, collective, fidelity verdict);
``files`` writes the pictures and ``report.md`` into the results directory.
They take results and topology documents as values (a session is only read
for its results, topology and directory).

May import: ``emulator.errors`` and ``emulator.fabric``.
"""
