"""What the user reads: the summary, `ringflow status` and the HTML report (SPEC 14)."""
