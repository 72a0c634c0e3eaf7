"""ringflow: time-boxed, chained rings of an ML search."""

__version__ = "0.1.0"
