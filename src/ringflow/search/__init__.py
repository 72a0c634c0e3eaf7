"""The search phase (SPEC 8, 9, 11.1): engineer sessions write new nodes in generations
until the hand-over point; each generation's parents are drawn by a rank-weighted lottery
among the scored nodes."""
