"""Weights you can trust (issue defects 1-7, without running programs): the key covers what
training reads and nothing else, and a damaged store or ledger is found and healed."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringflow.cli import main as ringflow
from ringflow.core.clock import load_node
from ringflow.core.errors import AcceptanceError, RingflowError
from ringflow.core.ledger import Ledger
from ringflow.core.state import Ring
from ringflow.execute import check_environment
from ringflow.nodes import import_static
from ringflow.ring.lock import lock_ring
from ringflow.verify import verify_ring
from ringflow.weights.heal import check_store, repair_store
from ringflow.weights.store import WeightsStore
from ringtools import full_config, make_candidate, make_task

KEY = "a" * 64
TREE = "b" * 64
WHO = {"ring": "r1", "node": "n001-a", "execution": "proxy/s0"}


def make_venv(folder: Path) -> Path:
    """A real, empty virtual environment: the candidates' own interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return Path(out.stdout.strip())


def install_fake(
    python: Path, name: str, version: str, editable: Path | None = None, serves: Path | None = None
) -> None:
    """What pip leaves behind: a dist-info folder (with direct_url.json for -e installs, and
    the finder a modern editable install maps its package with)."""
    site = site_packages(python)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if editable is not None:
        url = {"url": editable.as_uri(), "dir_info": {"editable": True}}
        (info / "direct_url.json").write_text(json.dumps(url))
    if serves is not None:
        finder = f"__editable___{name}_1_0_finder.py"
        (site / finder).write_text(f"MAPPING: dict[str, str] = {{{name!r}: {str(serves)!r}}}\n")
        (info / "RECORD").write_text(f"{finder},,\n{info.name}/METADATA,,\n")


def ring_over(tmp_path: Path, ring_id: str, **overrides) -> Ring:
    cands = tmp_path / "cands"
    if not cands.exists():
        make_candidate(cands / "a", mean=0.5, weights=True)
    task = tmp_path / "task" if (tmp_path / "task").exists() else make_task(tmp_path)
    config = full_config(ring_id=ring_id, task=str(task), candidates=str(cands),
                         baseline=None, **overrides)  # fmt: skip
    ring = lock_ring(config, tmp_path)
    import_static(ring)
    return ring


def s0_key(ring: Ring, view: str = "proxy") -> str:
    return load_node(ring, "n001-a").executions[view]["s0"]["key"]


# ---- defect 1 (keys part): labels are not in the key; an mtime-restoring rewrite is seen


def test_a_rewrite_that_restores_the_mtime_still_changes_the_view_hash(tmp_path):
    first = ring_over(tmp_path, "r1")
    data = tmp_path / "task" / "views" / "proxy" / "inputs" / "data.txt"
    before = data.stat()
    time.sleep(0.01)
    with open(data, "r+") as handle:  # same size, same inode: `rsync --inplace -t`
        handle.write("DATA")
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (data.stat().st_size, data.stat().st_ino) == (before.st_size, before.st_ino)
    second = ring_over(tmp_path, "r2")
    assert second.views["proxy"].inputs_hash != first.views["proxy"].inputs_hash
    assert s0_key(second) != s0_key(first)


# ---- defect 3: what is in the key but does not change training


def test_fixing_a_label_retrains_nothing_but_changes_the_evaluation(tmp_path):
    first = ring_over(tmp_path, "r1")
    (tmp_path / "task" / "views" / "proxy" / "labels" / "truth.txt").write_text("fixed\n")
    second = ring_over(tmp_path, "r2")
    assert s0_key(second) == s0_key(first)
    assert second.views["proxy"].labels_hash != first.views["proxy"].labels_hash
    assert second.search_hash != first.search_hash


def test_documentation_counts_by_default_and_not_when_the_config_ignores_it(tmp_path):
    first = ring_over(tmp_path, "r1")
    (tmp_path / "cands" / "a" / "METHOD.md").write_text("how it works\n")
    assert s0_key(ring_over(tmp_path, "r2")) != s0_key(first)
    ignoring = ring_over(tmp_path, "r3", tree_ignore=["METHOD.md"])
    assert list(ignoring.tree_ignore) == ["METHOD.md"]
    (tmp_path / "cands" / "a" / "METHOD.md").write_text("how it works, revised\n")
    assert s0_key(ring_over(tmp_path, "r4", tree_ignore=["METHOD.md"])) == s0_key(ignoring)


def test_ringflows_own_packages_are_not_in_the_key(tmp_path):
    python = make_venv(tmp_path / "progenv")
    ring = ring_over(tmp_path, "r1", program={"python": str(python)})
    packages = ring.environment["packages"]
    # The test tools and Snakemake live in ringflow's environment, not the candidates'.
    assert not any(p.startswith(("snakemake==", "pytest==", "ruff==")) for p in packages)
    assert ring.program_python == str(python)


def test_a_package_installed_into_ringflows_environment_changes_no_key(tmp_path, monkeypatch):
    first = ring_over(tmp_path, "r1")
    # What `pip install snakemake-executor-plugin-slurm` leaves in ringflow's environment.
    extra = tmp_path / "lib" / "site-packages"
    info = extra / "snakemake_executor_plugin_slurm-1.2.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: snakemake-executor-plugin-slurm\nVersion: 1.2.0\n"
    )
    monkeypatch.syspath_prepend(str(extra))
    import importlib.metadata

    assert importlib.metadata.version("snakemake-executor-plugin-slurm") == "1.2.0"
    second = ring_over(tmp_path, "r2")
    assert second.env_key == first.env_key and s0_key(second) == s0_key(first)
    check_environment(first)  # a job of the running ring still runs


# ---- defect 2: what changes training is in the key


def test_the_candidates_environment_is_hashed_completely(tmp_path):
    python = make_venv(tmp_path / "progenv")
    source = tmp_path / "mylib"
    (source / "mylib").mkdir(parents=True)
    (source / "mylib" / "__init__.py").write_text("SCALE = 1\n")
    install_fake(python, "mylib", "0.1", editable=source)
    program = {"python": str(python)}
    first = ring_over(tmp_path, "r1", program=program)
    assert "mylib==0.1" in first.environment["packages"]
    assert set(first.environment["editable"]) == {"mylib"}

    # An editable install changes by content, not by version.
    (source / "mylib" / "__init__.py").write_text("SCALE = 2\n")
    second = ring_over(tmp_path, "r2", program=program)
    assert s0_key(second) != s0_key(first)
    # One more distribution in the candidates' environment.
    install_fake(python, "extra", "1.0")
    third = ring_over(tmp_path, "r3", program=program)
    assert "extra==1.0" in third.environment["packages"]
    assert s0_key(third) != s0_key(second)


def test_an_editable_install_counts_by_the_folder_it_puts_on_the_path(tmp_path):
    python = make_venv(tmp_path / "progenv")
    project = tmp_path / "project"
    (project / "src" / "mylib").mkdir(parents=True)
    (project / "src" / "mylib" / "__init__.py").write_text("SCALE = 1\n")
    install_fake(python, "mylib", "1.0", editable=project, serves=project / "src" / "mylib")
    program = {"python": str(python)}
    first = ring_over(tmp_path, "r1", program=program)
    assert list(first.environment["editable"]["mylib"]) == [str(project / "src" / "mylib")]
    # Run folders and data beside the package are not what the program imports.
    (project / "runs").mkdir()
    (project / "runs" / "log.txt").write_text("anything\n")
    assert s0_key(ring_over(tmp_path, "r2", program=program)) == s0_key(first)
    (project / "src" / "mylib" / "__init__.py").write_text("SCALE = 2\n")
    assert s0_key(ring_over(tmp_path, "r3", program=program)) != s0_key(first)


def test_a_declared_mount_is_hashed_by_content(tmp_path):
    mount = tmp_path / "opt-x"
    mount.mkdir()
    (mount / "hparam.txt").write_text("lr=0.1\n")
    box = {**full_config()["sandbox"], "mounts": [str(mount)]}
    first = ring_over(tmp_path, "r1", sandbox=box)
    assert list(first.environment["mounts"]) == [str(mount)]
    (mount / "hparam.txt").write_text("lr=0.2\n")
    assert s0_key(ring_over(tmp_path, "r2", sandbox=box)) != s0_key(first)


def test_an_interpreter_other_than_program_python_is_hashed_by_content(tmp_path):
    # A tool installed in the candidates' environment, found on the PATH programs get.
    python = make_venv(tmp_path / "progenv")
    runner = python.parent / "runner"
    runner.write_text('#!/bin/sh\nexec python3 "$@"\n')
    runner.chmod(0o755)
    folder = make_candidate(tmp_path / "cands" / "a", mean=0.5, weights=True)
    (folder / "EXECUTION.json").write_text(json.dumps({"command": ["runner", "run.py"]}))
    first = ring_over(tmp_path, "r1", program={"python": str(python)})
    components = load_node(first, "n001-a").executions["proxy"]["s0"]["key_components"]
    assert components["interpreter"]["path"] == str(runner)
    runner.write_text('#!/bin/sh\nexec python3 -O "$@"\n')
    second = ring_over(tmp_path, "r2", program={"python": str(python)})
    assert s0_key(second) != s0_key(first)


def test_locale_and_threads_are_in_the_key_and_the_jobs_own_path_is_not(tmp_path, monkeypatch):
    base = ring_over(tmp_path, "r1")
    programs_path = f"{Path(base.program_python).parent}:/usr/local/bin:/usr/bin:/bin"
    assert base.environment["variables"]["PATH"] == programs_path
    assert base.environment["gpu"] == []
    lang = os.environ.get("LANG")
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    assert s0_key(ring_over(tmp_path, "r2")) != s0_key(base)
    if lang is None:
        monkeypatch.delenv("LANG")
    else:
        monkeypatch.setenv("LANG", lang)
    # A shell with another PATH (an activated virtual environment, a shim) runs the same
    # programs: the same keys, and the ring's jobs still run.
    monkeypatch.setenv("PATH", "/opt/other/bin:" + os.environ["PATH"])
    assert s0_key(ring_over(tmp_path, "r3")) == s0_key(base)
    check_environment(base)
    limits = {**full_config()["limits"], "threads": 3}
    assert ring_over(tmp_path, "r4", limits=limits).environment["threads"] == 3


def test_a_path_passed_on_to_programs_is_in_the_key(tmp_path, monkeypatch):
    sandbox = {**full_config()["sandbox"], "env_pass": ["PATH"]}
    base = ring_over(tmp_path, "r1", sandbox=sandbox)
    assert base.environment["variables"]["PATH"] == os.environ["PATH"]
    monkeypatch.setenv("PATH", "/opt/other/bin:" + os.environ["PATH"])
    assert s0_key(ring_over(tmp_path, "r2", sandbox=sandbox)) != s0_key(base)
    with pytest.raises(RingflowError, match=r"variables \(PATH\)"):
        check_environment(base)


def test_a_ring_locked_when_the_jobs_path_was_keyed_still_compares_it(tmp_path, monkeypatch):
    from ringflow.weights.environment import job_variables

    python = tmp_path / "env" / "bin" / "python"
    frozen = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert job_variables(frozen, python)["PATH"] == "/usr/bin:/bin"
    monkeypatch.setenv("PATH", "/elsewhere/bin")
    assert job_variables(frozen, python)["PATH"] == "/elsewhere/bin"
    locked_now = {"PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin"}
    assert job_variables(locked_now, python)["PATH"] == locked_now["PATH"]


def test_a_job_whose_environment_moved_refuses_naming_what(tmp_path, monkeypatch):
    python = make_venv(tmp_path / "progenv")
    ring = ring_over(tmp_path, "r1", program={"python": str(python)})
    check_environment(ring)  # nothing moved
    install_fake(python, "torch", "2.9.0")
    with pytest.raises(RingflowError, match=r"environment differs.*torch==2\.9\.0"):
        check_environment(ring)
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    with pytest.raises(RingflowError, match=r"variables \(LANG\)"):
        check_environment(ring)


def test_a_job_checks_the_environment_without_running_the_probe_again(tmp_path, monkeypatch):
    ring = ring_over(tmp_path, "r1")

    def probe_again(python):
        raise AssertionError("the environment was probed again for one job")

    monkeypatch.setattr("ringflow.weights.environment.probe_interpreter", probe_again)
    started = time.perf_counter()
    check_environment(ring)
    assert time.perf_counter() - started < 1.0


def test_key_explain_lists_every_component_and_names_an_unknown_variant(tmp_path, capsys):
    ring = ring_over(tmp_path, "r1")
    assert ringflow(["key", ring.ring_dir, "n001-a", "proxy", "s0", "--explain"]) == 0
    text = capsys.readouterr().out
    for component in ("tree_hash", "train_seed", "view_hash", "env_key", "train_args",
                      "packages", "editable", "mounts", "variables", "threads", "gpu"):  # fmt: skip
        assert component in text, component
    assert "MISMATCH" not in text
    assert ringflow(["key", ring.ring_dir, "n001-a", "proxy", "s9", "--explain"]) == 2
    err = capsys.readouterr().err
    assert "has no execution proxy/s9" in err and "Traceback" not in err


# ---- defect 6: a replay would not see undeclared files


def test_undeclared_files_in_a_weights_folder_fail_the_registration(tmp_path):
    store = WeightsStore(tmp_path / "store")
    work = tmp_path / "work"
    (work / "weights").mkdir(parents=True)
    (work / "weights" / "model.txt").write_text("m")
    (work / "weights" / "scaler.pkl").write_text("s")
    (work / "weights" / "vocab.txt").write_text("v")
    with pytest.raises(AcceptanceError, match=r"undeclared.*weights/scaler\.pkl"):
        store.register(TREE, KEY, work, ["weights/model.txt"], WHO, 10**6,
                       supplied=["weights/vocab.txt"])  # fmt: skip
    assert store.entry(TREE, KEY) is None
    os.unlink(work / "weights" / "scaler.pkl")
    entry, created = store.register(TREE, KEY, work, ["weights/model.txt"], WHO, 10**6,
                                    supplied=["weights/vocab.txt"])  # fmt: skip
    assert created and [f["path"] for f in entry["files"]] == ["weights/model.txt"]


# ---- defect 4: a damaged object is found, quarantined, and its key trains again


def registered_store(tmp_path: Path) -> tuple[WeightsStore, dict]:
    store = WeightsStore(tmp_path / "store")
    work = tmp_path / "work"
    (work / "weights").mkdir(parents=True, exist_ok=True)
    (work / "weights" / "model.txt").write_text("trained weights\n")
    entry, _ = store.register(TREE, KEY, work, ["weights/model.txt"], WHO, 10**6)
    return store, entry


def test_store_check_names_a_damaged_object_and_repair_quarantines_it(tmp_path):
    store, entry = registered_store(tmp_path)
    ledger = Ledger(tmp_path / "ledger.jsonl")
    files = [{"path": "weights/model.txt", "sha256": entry["files"][0]["sha256"]}]
    ledger.append("weights_registered", key=KEY, tree=TREE, files=files)
    obj = store.objects / entry["files"][0]["sha256"]
    os.chmod(obj, 0o644)
    obj.write_text("damaged weights\n")
    report = check_store(store, {"r1": ledger.path})
    assert [d.key for d in report.damaged] == [KEY]
    assert "altered" in report.problems[0] and obj.name in report.problems[0]

    done = repair_store(store, report, ledger)
    assert [q["key"] for q in done["quarantined"]] == [KEY]
    assert store.entry(TREE, KEY) is None and not obj.exists()
    kept = list((store.root / "quarantine").glob(f"*/objects/{obj.name}"))
    assert len(kept) == 1 and kept[0].read_text() == "damaged weights\n"
    assert list((store.root / "quarantine").glob(f"*/per_view/{TREE}/{KEY}.json"))
    assert json.loads(ledger.path.read_text().splitlines()[-1])["kind"] == "weights_quarantined"
    assert check_store(store, {"r1": ledger.path}).problems == []
    # The key is missing again: the next registration trains it and is the one entry.
    entry2, created = store.register(TREE, KEY, tmp_path / "work", ["weights/model.txt"],
                                     WHO, 10**6)  # fmt: skip
    assert created and (store.objects / entry2["files"][0]["sha256"]).read_text() == (
        "trained weights\n"
    )


def test_store_check_compares_the_index_with_the_ledger(tmp_path):
    store, _ = registered_store(tmp_path)
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.append("ring_locked")
    problems = check_store(store, {"r1": ledger.path}).problems
    assert any("no weights_registered record" in p for p in problems)
    other = "c" * 64
    ledger.append("weights_registered", key=other, tree=TREE, files=[])
    problems = check_store(store, {"r1": ledger.path}).problems
    assert any(f"key {other} is registered" in p and "no index entry" in p for p in problems)


# ---- defect 7: crash leftovers and anchored history


def test_leftovers_of_a_killed_registration_are_reported_and_removed(tmp_path):
    store, _ = registered_store(tmp_path)
    leftover = store.objects / ".incoming-abc123"
    leftover.write_bytes(b"half a copy")
    assert any("leftover" in p and leftover.name in p for p in store.verify())
    report = check_store(store)
    assert report.leftovers == [leftover]
    # Its registration still lives (it holds the file's flock): kept, however old.
    owner = os.open(leftover, os.O_RDONLY)
    fcntl.flock(owner, fcntl.LOCK_EX)
    os.utime(leftover, (0, 0))
    try:
        live = repair_store(store, report)
        assert live["in_use"] == [str(leftover)] and leftover.exists()
    finally:
        os.close(owner)
    # Its owner gone, it goes, however young.
    os.utime(leftover)
    done = repair_store(store, check_store(store))
    assert done["removed"] == [str(leftover)] and not leftover.exists()
    assert store.verify() == []


def test_a_truncated_ledger_fails_verify_through_its_anchors(tmp_path):
    ring = ring_over(tmp_path, "r1")
    layout_ledger = Path(ring.ring_dir) / "ledger.jsonl"
    assert verify_ring(ring.ring_dir) == []
    head = json.loads((Path(ring.ring_dir) / "ledger.head").read_text())
    lines = layout_ledger.read_bytes().splitlines(keepends=True)
    assert head["seq"] == len(lines) > 1
    layout_ledger.write_bytes(lines[0])
    problems = verify_ring(ring.ring_dir)
    assert any("ledger.head anchors line" in p and "cut short" in p for p in problems)


def test_a_torn_last_line_is_cut_by_ledger_repair_and_appends_go_on(tmp_path, capsys):
    ring = ring_over(tmp_path, "r1")
    path = Path(ring.ring_dir) / "ledger.jsonl"
    whole = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(b'{"seq": 99, "kind": "weights_regis')
    with pytest.raises(RingflowError, match="ledger repair"):
        Ledger(path).append("anything")
    assert ringflow(["ledger", "repair", ring.ring_dir]) == 0
    assert "cut the torn line" in capsys.readouterr().out
    assert path.read_bytes() == whole
    events = [json.loads(x) for x in (Path(ring.ring_dir) / "events.jsonl").open()]
    assert events[-1]["kind"] == "ledger_repaired" and events[-1]["action"] == "cut"
    assert list(Path(ring.ring_dir).glob("ledger.jsonl.torn-*"))
    Ledger(path).append("after_repair")
    assert verify_ring(ring.ring_dir) == []
    assert ringflow(["ledger", "repair", ring.ring_dir]) == 0
    assert "nothing to repair" in capsys.readouterr().out


def test_ledger_repair_refuses_a_ledger_damaged_before_its_last_line(tmp_path):
    book = Ledger(tmp_path / "ledger.jsonl")
    for kind in ("a", "b", "c"):
        book.append(kind)
    lines = book.path.read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace('"kind":"a"', '"kind":"x"')
    book.path.write_text("".join(lines) + '{"torn')
    with pytest.raises(RingflowError, match="not only its last line"):
        book.repair()


def test_verify_compares_the_store_index_with_the_ledger(tmp_path):
    ring = ring_over(tmp_path, "r1")
    store = WeightsStore(ring.store)
    work = tmp_path / "work"
    (work / "weights").mkdir(parents=True)
    (work / "weights" / "model.txt").write_text("m")
    # Registered in the store under this ring's name, but never written to its ledger.
    store.register(TREE, KEY, work, ["weights/model.txt"], {**WHO, "ring": "r1"}, 10**6)
    problems = verify_ring(ring.ring_dir)
    assert any("no weights_registered record" in p for p in problems), problems


def test_repair_leaves_a_key_in_use_for_later(tmp_path):
    from filelock import FileLock

    store, entry = registered_store(tmp_path)
    obj = store.objects / entry["files"][0]["sha256"]
    os.chmod(obj, 0o644)
    obj.write_text("damaged\n")
    with FileLock(str(store.locks / f"{KEY}.lock")):
        done = repair_store(store, check_store(store), lock_wait_s=0.3)
    assert done["busy"] == [KEY] and done["quarantined"] == []
    assert obj.exists() and store.entry(TREE, KEY) is not None
    assert repair_store(store, check_store(store))["quarantined"][0]["key"] == KEY
