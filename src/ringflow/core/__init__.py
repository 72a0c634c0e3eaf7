"""The floor every part of ringflow stands on: errors, JSON files, the one status
vocabulary, the ring's paths, its ledger and anchors, its clock and cutoff, the stop,
content hashing and the seed registry. It imports nothing above it
(docs/architecture.md#the-floors)."""
