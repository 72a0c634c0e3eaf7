"""Train once, replay many: weights keys, the content-addressed store, per-ring key
targets and content hashing (docs/contracts.md#weights)."""
