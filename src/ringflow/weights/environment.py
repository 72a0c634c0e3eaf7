"""The environment key (docs/contracts.md#weights): what a program can run and import, hashed
completely.

The candidates' interpreter (`program.python`) is run once per ring, at lock time, with a
small script that lists every installed distribution and version, the editable installs
and the folders `.pth` files add to its path. ringflow hashes those folders by content,
with the declared read-only `sandbox.mounts`, `PATH`, the locale, the thread limit and,
for an execution given GPUs, their model, driver and CUDA versions. ringflow's own
environment (Snakemake, its plugins, test tools) is never part of it.

The result is frozen in RING.json. A job checks it cheaply (a stat of the interpreter's
package folders, the variables, memoised hashes of the mounted folders) and runs the probe
again only when something moved; a real difference refuses the job.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import InputError, RingflowError
from ..core.hashing import HashMemo, is_cache, listing, listing_hash
from ..core.jsonio import sha256_json

# What a program is given of the job's environment besides ringflow's own variables
# (execute.py): its own PATH, whatever the job's, and the job's locale and time zone.
PASSED_LOCALE = ("LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LANGUAGE", "TZ")
# Those of them a program's results can depend on: the weights key covers them.
KEYED_VARIABLES = ("PATH", "LANG", *PASSED_LOCALE)
PROBE_TIMEOUT_S = 120

# Run by the candidates' interpreter (-I -B: no user site, no PYTHON* variables, no .pyc).
PROBE_SCRIPT = r"""
import ast, importlib.metadata as md, json, os, platform, site, sys
from urllib.parse import unquote, urlparse

def served(dist):
    # The folders an editable install puts on the path: its __editable__ .pth lines or its
    # finder's MAPPING; None when it has neither (then its project folder counts).
    found = []
    for f in dist.files or []:
        name = os.path.basename(str(f))
        if not name.startswith("__editable__"):
            continue
        try:
            text = f.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if name.endswith(".pth"):
            found += [ln.strip() for ln in text.splitlines()
                      if ln.strip() and not ln.startswith(("#", "import"))]
        elif name.endswith("finder.py"):
            for node in ast.parse(text).body:
                targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
                if getattr(targets[0], "id", None) == "MAPPING" and node.value is not None:
                    found += list(ast.literal_eval(node.value).values())
    return sorted(set(found)) or None

dists = []
for dist in md.distributions():
    name = (dist.metadata["Name"] or "").strip()
    editable = None
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        direct = None
    if isinstance(direct, dict) and (direct.get("dir_info") or {}).get("editable"):
        url = urlparse(direct.get("url", ""))
        if url.scheme == "file":
            editable = served(dist) or [unquote(url.path)]
    dists.append({"name": name, "version": dist.version, "editable": editable})
sites = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
pth = []
for folder in sites:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        continue
    for entry in names:
        if not entry.endswith(".pth"):
            continue
        try:
            lines = open(os.path.join(folder, entry), encoding="utf-8").read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                pth.append(os.path.normpath(os.path.join(folder, line)))
print(json.dumps({
    "implementation": platform.python_implementation(),
    "version": platform.python_version(),
    "machine": platform.machine(),
    "executable": sys.executable,
    "prefix": sys.prefix,
    "path": [p for p in sys.path if p],
    "sites": sites,
    "distributions": dists,
    "pth_paths": pth,
}))
"""


def _exclude_tooling(rel: str) -> bool:
    """Folders of a source tree that are not what a program imports: caches, dot-folders."""
    return is_cache(rel) or any(part.startswith(".") for part in rel.rstrip("/").split("/"))


def folder_hash(folder: str | os.PathLike, memo: HashMemo | None) -> str:
    """Content hash of a folder (or one file), without caches and dot-folders."""
    path = Path(folder)
    if path.is_file():
        entries = [{"path": path.name, **_one_file(path, memo)}]
        return listing_hash(entries)
    return listing_hash(listing(path, exclude=_exclude_tooling, memo=memo))


def _one_file(path: Path, memo: HashMemo | None) -> dict:
    from ..core.hashing import hash_files

    sha = hash_files([path], memo)[str(path)]
    return {"size": path.stat().st_size, "sha256": sha}


def probe_interpreter(python: str | os.PathLike) -> dict[str, Any]:
    """Run the candidates' interpreter once with the probe script; its facts as a dict."""
    python = Path(python)
    if not python.exists():
        raise InputError(
            f"program.python: {python} not found; build the candidates' environment "
            "(`python3 -m venv .venv-program` and install what the candidates import) or "
            "name your environment's python in program.python"
        )
    try:
        done = subprocess.run(
            [str(python), "-I", "-B", "-c", PROBE_SCRIPT],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"program.python: {python} could not be run: {exc}") from None
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise InputError(
            f"program.python: {python} failed to list its packages "
            f"(exit {done.returncode}): {tail[0]}"
        )
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise InputError(f"program.python: {python} printed no package list") from None


def program_variables(
    python: str | os.PathLike, env_pass=(), env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """PATH, locale and time zone as a program gets them: the folder of its interpreter and
    the system's on PATH (the job's own PATH never reaches it, unless `sandbox.env_pass`
    names it), the job's locale and time zone."""
    env = os.environ if env is None else env
    given = {
        "PATH": f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": env.get("LANG", "C.UTF-8"),
        **{name: env[name] for name in PASSED_LOCALE if name in env},
    }
    given.update({name: env[name] for name in env_pass if name in KEYED_VARIABLES and name in env})
    return given


def keyed_variables(
    python: str | os.PathLike, env_pass=(), env: Mapping[str, str] | None = None
) -> dict[str, str | None]:
    """The keyed variables as a program gets them (None: not given)."""
    given = program_variables(python, env_pass, env)
    return {name: given.get(name) for name in KEYED_VARIABLES}


def job_variables(
    frozen: Mapping[str, Any],
    python: str | os.PathLike,
    env_pass=(),
    env: Mapping[str, str] | None = None,
) -> dict[str, str | None]:
    """This job's keyed variables, to compare with `frozen` (a ring's RING.json). A ring
    locked before the key named the program's own PATH keyed the job's PATH: for such a
    ring the job's PATH still counts, as it did then."""
    env = os.environ if env is None else env
    current = keyed_variables(python, env_pass, env)
    if frozen.get("PATH") != current["PATH"]:
        current["PATH"] = env.get("PATH", "/usr/bin:/bin")
    return current


def gpu_component(env: Mapping[str, str] | None = None, nvml: Any = None) -> list[dict]:
    """Model, driver and CUDA version of each GPU the job is given; [] without GPUs.

    A job is given GPUs when CUDA_VISIBLE_DEVICES names some (the GPU profile and SLURM
    set it). Each model gives keys of its own, so a mixed partition never refuses a job.
    """
    from ..supervisor.gpu import open_nvml, parse_visible_devices

    env = os.environ if env is None else env
    visible = parse_visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    if not visible:
        return []
    module, why = open_nvml(nvml)
    if module is None:
        raise RingflowError(
            f"this job is given GPUs ({env.get('CUDA_VISIBLE_DEVICES')}) but NVML cannot "
            f"describe them ({why}); their model and driver must enter the weights key"
        )

    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    driver = text(module.nvmlSystemGetDriverVersion())
    cuda = module.nvmlSystemGetCudaDriverVersion()
    cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
    handles = [module.nvmlDeviceGetHandleByIndex(i) for i in range(module.nvmlDeviceGetCount())]
    uuids = [text(module.nvmlDeviceGetUUID(h)) for h in handles]
    facts = []
    for item in visible:
        if item.isdigit():
            index = int(item)
        else:
            index = next((i for i, u in enumerate(uuids) if u.startswith(item)), None)
        if index is None or index >= len(handles):
            raise RingflowError(f"CUDA_VISIBLE_DEVICES names {item!r}, which NVML does not list")
        model = text(module.nvmlDeviceGetName(handles[index]))
        facts.append({"model": model, "driver": driver, "cuda": cuda_version})
    return facts


def _outside(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    return not any(
        os.path.commonpath([real, os.path.realpath(root)]) == os.path.realpath(root)
        for root in roots
        if os.path.isdir(root)
    )


def describe(
    python: str | os.PathLike,
    threads: int,
    mounts: list[str],
    memo: HashMemo | None = None,
    env_pass=(),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(environment components, stamp): the first is hashed into the key, the second lets a
    job check cheaply that nothing moved."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InputError(f"environment: threads must be a positive integer, got {threads!r}")
    facts = probe_interpreter(python)
    packages = sorted({f"{d['name'].replace('_', '-').lower()}=={d['version']}"
                       for d in facts["distributions"] if d["name"]})  # fmt: skip
    editable_paths = {d["name"]: d["editable"] for d in facts["distributions"] if d["editable"]}
    editable = {name: _hash_each(paths, memo) for name, paths in editable_paths.items()}
    # Folders added by .pth files outside the environment (old-style editable installs).
    pth = {
        path: folder_hash(path, memo)
        for path in sorted(set(facts["pth_paths"]))
        if os.path.isdir(path) and _outside(path, [facts["prefix"]])
    }
    components = {
        "python": f"{facts['implementation']} {facts['version']}",
        "platform": facts["machine"],
        "packages": packages,
        "editable": editable,
        "pth_paths": pth,
        "mounts": mount_hashes(mounts, memo),
        "variables": keyed_variables(python, env_pass),
        "threads": threads,
        "gpu": [],
    }
    stamp = environment_stamp(python, facts)
    stamp["editable"] = editable_paths
    return components, stamp


def _hash_each(paths: list[str], memo: HashMemo | None) -> dict[str, str | None]:
    """{path: content hash} (None for a path that is gone)."""
    return {p: folder_hash(p, memo) if os.path.exists(p) else None for p in paths}


def mount_hashes(mounts: list[str], memo: HashMemo | None) -> dict[str, str]:
    """{host folder: content hash} of the declared read-only mounts."""
    hashes = {}
    for mount in mounts:
        path = Path(mount)
        if not path.is_absolute():
            raise InputError(f"sandbox.mounts: {mount!r} must be an absolute host path")
        if not path.exists():
            raise InputError(f"sandbox.mounts: {mount} does not exist")
        hashes[str(path)] = folder_hash(path, memo)
    return hashes


def environment_stamp(python: str | os.PathLike, facts: dict[str, Any]) -> dict[str, Any]:
    """What a job stats to see that the environment did not move: the interpreter and each
    folder on its path (installing or removing a package changes its folder)."""
    folders = sorted({p for p in facts["path"] if os.path.isdir(p)})
    return {
        "python": os.path.realpath(python),
        "folders": [[p, *_dir_stat(p)] for p in folders],
    }


def _dir_stat(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_mtime_ns, st.st_ino]


def stamp_matches(stamp: dict[str, Any], python: str | os.PathLike) -> bool:
    if os.path.realpath(python) != stamp["python"]:
        return False
    for path, mtime_ns, inode in stamp["folders"]:
        try:
            if _dir_stat(path) != [mtime_ns, inode]:
                return False
        except OSError:
            return False
    return True


def rehash_sources(
    frozen: dict[str, Any], stamp: dict[str, Any], memo: HashMemo | None
) -> dict[str, Any]:
    """The frozen components with editable sources, .pth folders and mounts hashed again."""
    current = dict(frozen)
    current["editable"] = {
        name: _hash_each(paths, memo) for name, paths in (stamp.get("editable") or {}).items()
    }
    current["pth_paths"] = {
        path: folder_hash(path, memo) if os.path.isdir(path) else None
        for path in frozen.get("pth_paths") or {}
    }
    current["mounts"] = {
        path: folder_hash(path, memo) if os.path.exists(path) else None
        for path in frozen.get("mounts") or {}
    }
    return current


def environment_key(components: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the environment components."""
    return sha256_json(components)


def differences(frozen: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The components that differ, each named with a short description."""
    names = sorted(set(frozen) | set(now))
    out = []
    for name in names:
        if frozen.get(name) == now.get(name):
            continue
        before, after = frozen.get(name), now.get(name)
        if isinstance(before, list) and isinstance(after, list):
            gone = sorted(map(str, set(map(json.dumps, before)) - set(map(json.dumps, after))))
            new = sorted(map(str, set(map(json.dumps, after)) - set(map(json.dumps, before))))
            out.append(f"{name} (gone: {', '.join(gone) or '-'}; new: {', '.join(new) or '-'})")
        elif isinstance(before, dict) and isinstance(after, dict):
            keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            out.append(f"{name} ({', '.join(keys)})")
        else:
            out.append(f"{name} ({before!r} -> {after!r})")
    return out
