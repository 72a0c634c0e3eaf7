"""The ring itself: its lock (RING.json), its clock and deadlines, its folder layout
and its hash-chained ledger (SPEC 9, 13)."""
