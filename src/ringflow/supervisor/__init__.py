"""Execution supervisor: health sampling, hang detection, deadlines that leave nothing
behind (SPEC 7)."""

from .settings import HealthSettings, ResourceLimits
from .supervise import Outcome, supervise, wait_for

__all__ = ["HealthSettings", "Outcome", "ResourceLimits", "supervise", "wait_for"]
