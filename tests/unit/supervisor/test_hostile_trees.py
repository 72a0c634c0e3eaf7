"""Every reader of what a program or an engineer session wrote, fed hostile trees.

Property style: each seed builds a tree from a random mix of what a candidate controls
(names that are not UTF-8 or hold newlines and escape sequences, nesting past PATH_MAX,
symlink loops, FIFOs, sockets, sparse files, deeply nested JSON, a huge single line) and
runs it through every reader. None may raise, hang or leave a name a JSON record cannot
carry: each gives a verdict with a reason, escaped (docs/limits.md).
"""

from __future__ import annotations

import json
import os
import random
import socket
import stat
import time
import tracemalloc
from pathlib import Path

import pytest

from ringflow.candidate import TreeLimits, check_tree, load_solution
from ringflow.carryover.engineer import LAST_MESSAGES, MESSAGE_CHARS, last_lines
from ringflow.carryover.snapshot import walk_checked
from ringflow.core.errors import CandidateError
from ringflow.core.jsonio import atomic_write_json, read_json
from ringflow.core.safetext import escape_name, printable
from ringflow.core.safetree import remove_tree, usage
from ringflow.reporting.digest import LINE_CHARS, last_line
from ringflow.reporting.progress import progress_line, snapshot
from ringflow.sandbox.output_check import refuse_pointers
from ringflow.sandbox.ownership import OwnershipLoan
from ringflow.supervisor.output_limits import over_limits
from ringflow.supervisor.sampling import folder_bytes, read_progress
from ringflow.weights.store import WeightsStore
from ringflow.workcopy import reset_dir

# Trees an ordinary user owns: modes it may have to change before reading them.
pytestmark = pytest.mark.user

NAMES = [b"bad\xff\xfename", b"new\nline", b"\x1b[31mred\x1b[0m", b"back\\slash",
         b"\xe2\x80\xaeevil",
         b"plain.txt", b"-dash", b" space "]  # fmt: skip


def deep(fd: int, levels: int, width: int = 200) -> int:
    """Folders `levels` deep below fd (past PATH_MAX with the defaults); the deepest fd."""
    current = os.dup(fd)
    for _ in range(levels):
        os.mkdir("d" * width, dir_fd=current)
        nxt = os.open("d" * width, os.O_RDONLY | os.O_DIRECTORY, dir_fd=current)
        os.close(current)
        current = nxt
    return current


# One line of 8 MiB that starts and ends with escape sequences, an undecodable byte last.
HUGE_LINE = b"\x1b]0;title\x07" + b"x" * (8 << 20) + b"\x1b[2J\x07\xff\n"

FEATURES = ("names", "deep", "loop", "fifo", "socket", "sparse", "deep_json", "huge_line",
            "dangling", "unreadable")  # fmt: skip


def hostile_tree(root: Path, rng: random.Random, features: set[str]) -> list[socket.socket]:
    """Build a tree of `features` under root; returns sockets to keep bound."""
    root.mkdir(parents=True)
    (root / "run.py").write_text("print('hi')\n")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    held = []
    try:
        if "names" in features:
            for name in rng.sample(NAMES, 4):
                if rng.random() < 0.5:
                    os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
                else:
                    os.symlink(b"/dev/null", name, dir_fd=fd)
        if "deep" in features:
            bottom = deep(fd, rng.choice([25, 30, 40]))
            os.close(os.open(b"deep\xffname", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=bottom))
            os.close(bottom)
        if "loop" in features:
            os.symlink("loop-a", "loop-b", dir_fd=fd)
            os.symlink("loop-b", "loop-a", dir_fd=fd)
        if "fifo" in features:
            os.mkfifo("fifo", dir_fd=fd)
        if "socket" in features:
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(str(root / "sock"))
            held.append(sock)
        if "sparse" in features:
            with open(root / "sparse.bin", "wb") as handle:
                handle.truncate(rng.choice([1, 2, 8]) << 30)
        if "deep_json" in features:
            depth = rng.choice([2000, 100_000])
            (root / "progress.json").write_text("[" * depth + "]" * depth)
            (root / "EXECUTION.json").write_text('{"a":' * 5000 + "1" + "}" * 5000)
        if "huge_line" in features:
            (root / "huge.log").write_bytes(HUGE_LINE)
        if "dangling" in features:
            os.symlink("nowhere", "dangling", dir_fd=fd)
        if "unreadable" in features:
            os.mkdir("locked", dir_fd=fd)
            os.close(os.open("locked/inner", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
            os.chmod("locked", 0, dir_fd=fd)
    finally:
        os.close(fd)
    return held


def recordable(text: str) -> None:
    """A reason can go into JSON, back out, and onto a terminal unchanged in meaning."""
    assert isinstance(text, str)
    text.encode("utf-8")  # no lone surrogate: names were escaped
    assert printable(text) == text.replace("\n", "\\n") or "\n" not in text
    assert "\x1b" not in text and "\x07" not in text


SEEDS = range(12)


@pytest.fixture(params=SEEDS, ids=lambda seed: f"seed{seed}")
def tree(request, tmp_path):
    rng = random.Random(request.param)
    features = set(rng.sample(FEATURES, rng.randint(3, len(FEATURES))))
    if request.param < len(FEATURES):
        features.add(FEATURES[request.param])  # every feature alone leads at least once
    root = tmp_path / "tree"
    held = hostile_tree(root, rng, features)
    yield root, features
    for sock in held:
        sock.close()
    remove_tree(root, ignore_errors=True)


def test_the_output_check_gives_a_reason_for_any_tree(tree):
    root, features = tree
    reason = refuse_pointers(root)
    refusing = {"names", "loop", "fifo", "socket", "dangling", "deep"} & features
    if refusing:
        assert reason is not None and "output" in reason
    if reason is not None:
        recordable(reason)
        atomic_write_json(root.parent / "score.json", {"reason": f"invalid: {reason}"})
        assert read_json(root.parent / "score.json")["reason"].endswith(reason)


def test_the_limit_count_never_stops_short_and_counts_sparse_files_whole(tree):
    root, features = tree
    found = usage(root, make_readable=True)
    assert found.over is None
    if "sparse" in features:
        assert found.bytes >= 1 << 30
        assert "output limit exceeded" in over_limits([root], None, 1 << 29)
    assert "output file limit" in over_limits([root], max(found.entries - 1, 1), None)
    assert over_limits([root], found.entries, found.bytes) is None


def test_the_health_sample_reads_any_folder_and_progress_file(tree):
    root, features = tree
    size, mtime = folder_bytes(root)
    assert size >= 0 and mtime > 0
    progress = read_progress(root / "progress.json")
    if "deep_json" in features:
        assert progress["content"] is None and progress["content_error"]
        json.dumps(progress)


def test_a_workspace_or_candidate_is_refused_with_a_reason(tree):
    root, features = tree
    refusing = {"names", "loop", "fifo", "socket", "dangling", "deep", "deep_json"} & features
    limits = TreeLimits(max_files=10_000, max_bytes=1 << 30, max_file_bytes=512 << 20)
    try:
        check_tree(root, limits)
        load_solution(root, 1 << 30, limits)
    except CandidateError as exc:
        recordable(str(exc))
    else:
        assert not refusing and "sparse" not in features and "unreadable" not in features


def test_a_seal_copies_what_it_can_and_lists_the_rest(tree):
    root, features = tree
    entries, left = walk_checked(root)
    for rel, _st in entries:
        rel.encode("utf-8")
        assert len(rel) <= 1024
    for item in left:
        recordable(item["path"] + item["why"])
    if "names" in features:
        assert any(item["why"] == "name is not plain text" for item in left)


def test_ownership_and_store_walks_finish_on_any_tree(tree):
    root, _features = tree
    me = os.getuid(), os.getgid()
    loan = OwnershipLoan(*me)
    loan.adopt(root)
    for note in loan.take_back():
        recordable(note)
    for name in WeightsStore._undeclared(root.parent, {"tree/weights/w.bin"}, set()):
        recordable(name)


def test_any_tree_is_removed_whole(tree):
    root, _features = tree
    reset_dir(root)
    assert list(root.iterdir()) == []
    remove_tree(root)
    assert not root.exists()


def test_names_are_escaped_one_way_and_text_for_the_terminal_another():
    assert escape_name(b"a\xffb\nc\\d\x1b") == "a\\xffb\\nc\\\\d\\x1b"
    assert escape_name("plain/name.txt") == "plain/name.txt"
    shown = printable("stderr: \x1b[2J\x1b]0;pwned\x07 \u202eevil\ndone", keep_newlines=True)
    assert shown == "stderr: \\x1b[2J\\x1b]0;pwned\\x07 \\u202eevil\ndone"
    assert printable("a\\b") == "a\\b"  # text that already holds an escaped name is kept


def test_a_log_line_ends_at_a_newline_only_and_keeps_every_byte(tmp_path):
    # What came before a carriage return or a line separator is not hidden, a byte that
    # is not UTF-8 is shown as itself, and a zero-width space is not invisible.
    path = tmp_path / "stderr.log"
    path.write_bytes("Error: n003 failed\rall fine\u2028ok\x85 \u200b\n".encode() + b"\xfe\n")
    assert last_line(path) == "\\xfe"
    path.write_bytes("Error: n003 failed\rall fine\u2028ok\x85 \u200b\r\n".encode())
    assert last_line(path) == "Error: n003 failed\\rall fine\\u2028ok\\x85 \\u200b"


def test_a_progress_file_that_is_a_fifo_is_not_opened(tmp_path):
    fifo = tmp_path / "progress.json"
    os.mkfifo(fifo)
    record = read_progress(fifo)
    assert record["content"] is None and record["content_error"] == "not a regular file"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# Logs a program or a session writes, as the log readers meet them: the huge line of the
# hostile trees, a short last line of escape sequences, millions of lines, names with
# newlines (one line per piece), nothing but blank lines.
LOGS = {
    "huge_line": None,  # built by hostile_tree
    "escapes": b"ok\n\x1b[31mred alert\x1b[0m \xe2\x80\xae\x07\xc2\x9b\xff\r\n",
    "many_lines": b"line\n" * 2_000_000 + b"\x1b]0;last\x07\n",
    "newlines": NAMES[1] + b"\n" + NAMES[0] + b"\n",
    "blank": b"\n \n\t\n",
}


def log_file(tmp_path: Path, kind: str) -> Path:
    if LOGS[kind] is None:
        hostile_tree(tmp_path / "tree", random.Random(0), {kind})
        return tmp_path / "tree" / "huge.log"
    path = tmp_path / f"{kind}.log"
    path.write_bytes(LOGS[kind])
    return path


def bounded_read(reader, path: Path):
    """(what reader returned, seconds, peak bytes allocated while it ran)."""
    tracemalloc.start()
    try:
        started = time.monotonic()
        value = reader(path)
        took = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return value, took, peak


def shown(line: str, limit: int) -> None:
    """A line fit for a terminal: nothing left to escape, no escape sequence, bounded."""
    assert printable(line) == line
    assert not {"\x1b", "\x07", "\x9b", "\r", "\n", "\u202e"} & set(line), repr(line)
    assert len(line) <= limit


@pytest.mark.parametrize("kind", sorted(LOGS))
def test_the_log_readers_read_any_log_from_its_tail_and_escape_it(tmp_path, kind):
    path = log_file(tmp_path, kind)
    line, took, peak = bounded_read(last_line, path)
    assert took < 1 and peak < 1 << 20, (took, peak)
    shown(line, LINE_CHARS)
    messages, took, peak = bounded_read(last_lines, path)
    assert took < 1 and peak < 1 << 20, (took, peak)
    assert len(messages) <= LAST_MESSAGES
    for message in messages:
        shown(message, MESSAGE_CHARS)
    if kind == "blank":
        assert line == "" and messages == []
    else:
        assert line and messages[-1].strip()[:20] == line[:20]  # both read the same line
    if kind == "huge_line":
        assert line == "x" * LINE_CHARS  # the line's tail, cut: never 8 MiB of it
        assert messages[-1] == "x" * MESSAGE_CHARS
    if kind == "escapes":
        assert messages == ["ok", "\\x1b[31mred alert\\x1b[0m \\u202e\\x07\\x9b\\xff"]
        assert line == messages[-1]


def test_the_log_readers_never_open_what_is_not_a_file(tmp_path):
    fifo = tmp_path / "stderr.log"
    os.mkfifo(fifo)
    assert last_lines(fifo) == [] and last_lines(tmp_path / "missing.log") == []
    assert last_line(tmp_path / "missing.log") == ""


def test_the_progress_line_escapes_what_a_ring_folder_holds(tmp_path):
    """The progress line quotes the ring's id and the best node's id, an execution
    folder's name: neither reaches the terminal with an escape sequence in it."""
    ring = tmp_path / "ring"
    node = "n001-\x1b[31mred\x07\u202e"
    exec_dir = ring / "nodes" / node / "exec" / "a" / "s0"
    exec_dir.mkdir(parents=True)
    (exec_dir / "result.json").write_text(json.dumps({"status": "ok"}))
    (exec_dir / "score.json").write_text(json.dumps({"scored": True, "valid": True,
                                                     "score": 0.5}))  # fmt: skip
    (ring / "nodes" / "index.json").write_text(json.dumps({"nodes": []}))
    (ring / "RING.json").write_text(json.dumps({
        "ring_id": "r\x1b]0;pwned\x07", "search_views": ["a"],
        "task": {"direction": "maximize"}, "initial_cutoff": time.time() + 600}))  # fmt: skip
    snap = snapshot(ring)
    assert snap["best"] == (node, 0.5)
    line = progress_line(snap)
    shown(line, 1000)
    assert "ring r\\x1b]0;pwned\\x07:" in line
    assert "n001-\\x1b[31mred\\x07\\u202e 0.5000" in line


def test_a_progress_file_full_of_escape_sequences_is_recorded_as_data(tmp_path):
    """progress.json reaches health_latest.json as JSON: unchanged when read back, and its
    control characters written as JSON escapes, never as raw bytes in the file."""
    path = tmp_path / "progress.json"
    step = "\x1b[2J\x1b]0;pwned\x07\r"
    path.write_text(json.dumps({"step": step}))
    record = read_progress(path)
    assert record["content"] == {"step": step}
    atomic_write_json(tmp_path / "health_latest.json", {"progress": record})
    raw = (tmp_path / "health_latest.json").read_bytes()
    assert not {0x1B, 0x07, 0x0D} & set(raw), raw
    assert read_json(tmp_path / "health_latest.json")["progress"]["content"] == {"step": step}


def test_the_output_check_names_the_first_pointer_and_counts_the_rest(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "data.csv").write_text("id,label\n")
    for name in ("a.csv", "b.csv", "c.csv"):
        os.symlink("/etc/hostname", out / name)
    reason = refuse_pointers(out)
    assert reason.startswith("output ") and "is a symbolic link (to /etc/hostname)" in reason
    assert reason.endswith("(2 more entries of the output refused too)"), reason
    os.unlink(out / "b.csv")
    os.unlink(out / "c.csv")
    assert (
        refuse_pointers(out)
        == "output a.csv is a symbolic link (to /etc/hostname); output must be data"
    )


def test_the_last_log_lines_are_those_of_the_whole_log(tmp_path):
    from ringflow.core.safetext import last_log_lines, log_lines

    rng = random.Random(7)
    pieces = [b"ok", b"", b"  ", b"\xe2\x80\x83", b"\xff\xfe", b"a\rb", b"\x1b[2Jx", b"z" * 300]
    for _ in range(300):
        data = b"\n".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        for count in (0, 1, 3, 10):
            assert last_log_lines(data, count) == (log_lines(data)[-count:] if count else [])
