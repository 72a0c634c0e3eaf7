"""The ring itself: its lock (RING.json), its clock and deadlines, its folder layout
and its hash-chained ledger (docs/ring-folder.md#the-lock-and-the-clock)."""
