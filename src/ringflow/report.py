"""`ringflow report`: a self-contained HTML page of the ring (Jinja2)."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from .jsonio import atomic_write_text
from .layout import RingLayout
from .ring import load_ring
from .summary import render_summary


def write_report(ring_dir, out=None) -> Path:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring["ring_dir"]))
    env = Environment(loader=PackageLoader("ringflow", "templates"),
                      autoescape=select_autoescape())
    html = env.get_template("report.html.j2").render(ring=ring, summary=render_summary(ring_dir))
    target = Path(out) if out else layout.report
    atomic_write_text(target, html)
    return target
