"""Execution supervisor: health sampling, hang detection, deadlines that leave nothing
behind (docs/operations.md#health-supervision)."""

from .settings import HealthSettings, ResourceLimits
from .supervise import Outcome, supervise, wait_for

__all__ = ["HealthSettings", "Outcome", "ResourceLimits", "supervise", "wait_for"]
