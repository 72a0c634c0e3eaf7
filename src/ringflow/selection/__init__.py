"""Final selection: promotion, the view-blind review's disguised views, fresh guard
seeds, guard statistics and the decision (SPEC 5, 10)."""
