"""How scores and guard figures read in the summary, the status and the report: four
decimals, except a value too small for them, which keeps four significant digits (a
guard between near-copies of one program is all in the seventh decimal, and `+0.0000`
said nothing)."""

from __future__ import annotations

SMALLEST_FIXED = 5e-5  # what rounds to 0.0000 or 0.0001 at four decimals


def figure(value, digits: int = 4, sign: bool = False) -> str:
    """`value` with `digits` decimals ("-" for None; a non-number as it is)."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    plus = "+" if sign else ""
    if value != 0 and abs(value) < SMALLEST_FIXED * 10 ** (4 - digits):
        return f"{value:{plus}.4g}"
    return f"{value:{plus}.{digits}f}"


def advantage(value: float, maximize: bool) -> str:
    """An advantage signed so that positive is better, as an amount and which way it goes
    in the task's scores: "0.0310 better", "2.1031 lower (better)", "0.0361 higher (worse)"."""
    if value >= 0:
        return f"{figure(value)} {'better' if maximize else 'lower (better)'}"
    return f"{figure(-value)} {'worse' if maximize else 'higher (worse)'}"
