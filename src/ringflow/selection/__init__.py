"""Final selection: promotion, the view-blind review's disguised views, fresh guard
seeds, guard statistics and the decision (docs/operations.md#final-selection)."""
