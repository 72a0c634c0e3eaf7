"""The search phase (docs/contracts.md#engineer): engineer sessions write new nodes in generations
until the hand-over point; each generation's parents are drawn by a rank-weighted lottery
among the scored nodes."""
