"""What the user reads: the summary, `ringflow status` and the HTML report
(docs/operations.md#while-a-ring-runs)."""
