"""Named rings (docs/operations.md#chains): a chain file names rings, and each name is a Snakemake
target.

    rings:
      ring1: {ring_id: demo, engineer: {command: builtin}}
      ring2: {ring_id: demo-2, continue_from: ring1}

A ring's configuration is the workflow's configuration with the ring's overrides laid over
it, key by key. `continue_from` naming an earlier ring of the chain means that ring's folder,
and makes this ring wait for it: its lock and its import of carried-over work take that
ring's `stop_manifest.json` and seals as inputs. `ring_id` defaults to the ring's name.

Without a `rings:` key and without a configuration file, the demo's chain
(`config/chain.yaml`) applies while the task is the embedded demo, so `snakemake ring1` and
`snakemake ring2` run the demo chain from a fresh checkout. The configured ring (`ring_id`)
is the default target; when a ring of the chain has the same folder, it is that ring, with
the chain's overrides.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError
from ..core.layout import RingLayout
from ..core.yamlio import load_yaml

NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9]*")
# Rule names of the workflow itself, which a ring's name must not take.
RESERVED = ("all",)
# The configured ring's module when no ring of the chain has its folder.
PLAIN = "configured"


@dataclass
class NamedRing:
    name: str
    config: dict
    # The ring of the chain this one continues, None for a first ring or an outside parent.
    parent: str | None = None

    @property
    def root(self) -> Path:
        return Path(self.config["runs_dir"]) / self.config["ring_id"]

    @property
    def prefix(self) -> str:
        """What the ring's rule names start with (the configured ring keeps plain names)."""
        return "" if self.name == PLAIN else f"{self.name}_"


def merge(base: dict, overrides: dict) -> dict:
    """base with overrides laid over it, key by key (nested mappings merged, not replaced)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_chain_file(path: str | Path) -> dict:
    """The `rings:` mapping of a chain file."""
    with open(path) as handle:
        data = load_yaml(handle) or {}
    rings = data.get("rings")
    if not isinstance(rings, dict) or not rings:
        raise InputError(f"{path}: a chain file names its rings under `rings:`")
    return rings


def chain_overrides(config: dict, demo_chain: str | Path | None) -> dict:
    """The chain's rings and their overrides: `rings:` of the configuration, else the demo
    chain (demo_chain: None when a configuration file was given, or the task is not the
    embedded demo), else none."""
    rings = config.get("rings") or {}
    if rings:
        return rings
    if demo_chain is not None and not config.get("task"):
        return load_chain_file(demo_chain)
    return {}


def _where(base: dict, ring_config: dict) -> tuple[str, str]:
    return (str(Path(ring_config.get("runs_dir", base["runs_dir"]))), str(ring_config["ring_id"]))


def named_rings(config: dict, demo_chain: str | Path | None) -> list[NamedRing]:
    """Every ring of the chain, in the chain's order, with its whole configuration."""
    base = {key: value for key, value in config.items() if key != "rings"}
    rings: list[NamedRing] = []
    by_name: dict[str, NamedRing] = {}
    chain = chain_overrides(config, demo_chain)
    for name, overrides in chain.items():
        name = str(name)
        if not NAME_PATTERN.fullmatch(name) or name in RESERVED or name == PLAIN:
            raise InputError(
                f"chain: ring name {name!r} must be letters and digits, starting with a "
                f"letter, and not {', '.join((*RESERVED, PLAIN))} (it is a Snakemake target)"
            )
        if overrides is None:
            overrides = {}
        if not isinstance(overrides, dict):
            raise InputError(f"chain: ring {name}: its overrides must be a mapping of config keys")
        if "rings" in overrides:
            raise InputError(f"chain: ring {name}: a ring cannot name rings of its own")
        ring_config = merge(base, {"ring_id": name, **overrides})
        parent = None
        previous = ring_config.get("continue_from")
        if previous in by_name:
            parent = previous
            ring_config["continue_from"] = str(by_name[previous].root)
        elif previous in chain:
            raise InputError(
                f"chain: ring {name} continues from {previous}, which is not an earlier ring "
                "of the chain"
            )
        ring = NamedRing(name, ring_config, parent)
        clash = [r.name for r in rings if _where(base, r.config) == _where(base, ring_config)]
        if clash:
            raise InputError(
                f"chain: rings {clash[0]} and {name} both run in {ring.root}: give each its "
                "own ring_id"
            )
        rings.append(ring)
        by_name[name] = ring
    return rings


def workflow_rings(
    config: dict, demo_chain: str | Path | None
) -> tuple[list[NamedRing], NamedRing]:
    """(every ring the workflow defines, the configured ring: the default target)."""
    rings = named_rings(config, demo_chain)
    base = {key: value for key, value in config.items() if key != "rings"}
    for ring in rings:
        if _where(base, ring.config) == _where(base, base):
            return rings, ring
    configured = NamedRing(PLAIN, base)
    return [configured, *rings], configured


# The folder of the ring of the chain a ring waits for, handed to the ring's module beside
# its configuration (rules/common.smk takes it out before validating the rest).
CHAIN_PARENT_KEY = "_chain_parent"
RING_NAME_KEY = "_ring_name"


def module_config(ring: NamedRing, config: dict) -> dict:
    """What the ring's module is given: its configuration, the ring it waits for, and
    the name its target has (a ring of a chain file)."""
    given = dict(config)
    if ring.parent is not None:
        given[CHAIN_PARENT_KEY] = config["continue_from"]
    if ring.prefix:
        given[RING_NAME_KEY] = ring.name
    return given


def ancestors(rings: list[NamedRing], ring: NamedRing) -> list[NamedRing]:
    """The rings of the chain this one continues, oldest first."""
    by_name = {r.name: r for r in rings}
    line = []
    while ring.parent is not None:
        ring = by_name[ring.parent]
        line.append(ring)
    return line[::-1]


def invocation_rings(
    rings: list[NamedRing], configured: NamedRing, targets: list[str] | set[str]
) -> list[NamedRing]:
    """The rings a Snakemake invocation runs, oldest first: the named targets with the rings
    they continue (a finished one is left out), the ring of each file target, or the
    configured ring."""
    chosen: list[NamedRing] = []
    by_name = {r.name: r for r in rings}

    def add(ring: NamedRing) -> None:
        for earlier in [*ancestors(rings, ring), ring]:
            finished = RingLayout(earlier.root).stop_manifest.exists()
            if earlier not in chosen and (earlier is ring or not finished):
                chosen.append(earlier)

    for target in targets or ["all"]:
        if target == "all":
            add(configured)
        elif target in by_name:
            add(by_name[target])
        else:
            for ring in rings:
                if ring.prefix and target.startswith(ring.prefix):
                    add(ring)
                    break
                if _inside(target, ring.root):
                    add(ring)
                    break
            else:
                add(configured)
    return chosen


def _inside(target: str, root: Path) -> bool:
    try:
        Path(target).resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def ring_targets(root: str | Path) -> list[str]:
    """What a finished ring has: its stop manifest, final decision, reproduction record,
    summary and report, and the result and score of every execution that has started.

    Snakemake leaves a missing intermediate file alone while the files made from it are up to
    date; listing every started execution's records makes a deleted result.json re-run it.
    """
    layout = RingLayout(Path(root))
    targets = [
        layout.stop_manifest,
        layout.decision,
        layout.repro_record,
        layout.summary,
        layout.report,
    ]
    for node, view, variant, _folder in layout.executions():
        targets += [layout.result(node, view, variant), layout.score(node, view, variant)]
    return [str(path) for path in targets]
