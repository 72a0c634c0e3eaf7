"""The content-addressed weights store: train once, replay many (docs/contracts.md#weights).

Layout under the store root (mode 0700, shared by the rings of a chain):

    objects/<sha256>              read-only (0444) blobs, one per distinct content
    per_view/<tree>/<key>.json    index of one trained state: its files and who wrote it
    locks/<key>.lock              exclusive lock held while a key is trained or looked up

    checked/<sha256>.json         the stat (with ctime) at which an object last hashed right
    anchors/                      what the store vouches for (anchors.py)

Objects reach an execution as read-only hardlinks (a copy across
filesystems), never as symlinks. Each index entry records the size, mtime_ns
and inode its objects had at registration, and `checked/` the ctime of each
object when it last hashed to its name; a replay rehashes an object when any of
them differs. An editor can restore size, mtime and inode, never the ctime
(restoring mtime sets it), so an altered object is caught without rehashing
gigabytes on every replay (docs/integrity.md#replays). Ringflow's own hard links
change the ctime too: each re-records it under the object's lock, when the object
was intact just before. Every registration is anchored (key → objects) before
its index entry is written, and a replay's entry must list what was anchored.
Callers hold the key lock and write the ledger.

A registration writes through temporary files (`objects/.incoming-*`, `per_view/<tree>/
.*.tmp`) that it holds an flock on while it lives; one a killed registration left is
removed by the next ring's start or `store repair` once its flock is free (never by age).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath
from typing import Any

from filelock import FileLock, Timeout

from ..core.anchors import StoreAnchors, same_files
from ..core.errors import (
    AcceptanceError,
    DeadlineReached,
    InputError,
    ReplayCheckFailed,
    StoreError,
)
from ..core.hashing import CHUNK_BYTES, hash_files, is_cache, sha256_file
from ..core.hints import ringflow_command
from ..core.jsonio import fsync_dir
from ..core.safetext import escape_name
from ..core.safetree import TreeLimit, walk
from .keys import SHA256_PATTERN

OBJECT_MODE = 0o444
PRIVATE_MODE = 0o644
VERIFY_MODES = ("stat", "full")
# Room for a checked-stat record of four integers of up to 20 digits each.
CHECKED_WIDTH = 160
WHO_FIELDS = ("ring", "node", "execution")

# A hardlink is refused across filesystems (EXDEV), past the link-count limit
# (EMLINK), by filesystems without links, or by protected_hardlinks (EPERM): copy then.
LINK_FALLBACK_ERRNOS = frozenset({errno.EXDEV, errno.EMLINK, errno.EPERM, errno.EOPNOTSUPP})

# copy_file_range keeps the bytes in the kernel; older kernels and some
# filesystems refuse it, and then a read/write loop does the copy.
COPY_RANGE_BYTES = 64 << 20
COPY_RANGE_UNSUPPORTED = frozenset(
    {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF}
)


def _require_sha256(what: str, value: Any) -> str:
    if not isinstance(value, str) or not SHA256_PATTERN.fullmatch(value):
        raise InputError(f"weights store: {what} must be a sha256 hex digest, got {value!r}")
    return value


def _safe_relpath(raw: Any) -> str:
    """A relative posix path inside a folder; ValueError says why not."""
    if not isinstance(raw, str) or not raw:
        raise ValueError("is not a non-empty path")
    path = PurePosixPath(raw)
    if path.is_absolute():
        raise ValueError("is an absolute path")
    if any(part == ".." for part in path.parts):
        raise ValueError("leaves its folder ('..')")
    if "\\" in raw or not path.parts or path.parts == (".",):
        raise ValueError("is not a plain relative path")
    return path.as_posix()


def _copy_bytes(source_fd: int, dest_fd: int) -> None:
    """Copy a whole file between descriptors, in the kernel when it can."""
    try:
        while os.copy_file_range(source_fd, dest_fd, COPY_RANGE_BYTES):
            pass
        return
    except OSError as exc:
        if exc.errno not in COPY_RANGE_UNSUPPORTED:
            raise
    # Start again from scratch: the failed call may have left nothing or a part.
    os.lseek(source_fd, 0, os.SEEK_SET)
    os.lseek(dest_fd, 0, os.SEEK_SET)
    os.ftruncate(dest_fd, 0)
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    while count := os.readv(source_fd, [buffer]):
        written = 0
        while written < count:
            written += os.write(dest_fd, view[written:count])


def _hash_fd(fd: int) -> str:
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    offset = 0
    while count := os.preadv(fd, [buffer], offset):
        digest.update(view[:count])
        offset += count
    return digest.hexdigest()


def _copy_hashing(source: str | os.PathLike, dest_fd: int) -> str:
    """Copy a file into an open (read-write) descriptor, fsync it, and return the sha256
    of the bytes that landed there, read back from the copy itself."""
    source_fd = os.open(source, os.O_RDONLY)
    try:
        _copy_bytes(source_fd, dest_fd)
    finally:
        os.close(source_fd)
    os.fsync(dest_fd)
    return _hash_fd(dest_fd)


def _temp_beside(path: Path, tag: str) -> Path:
    """An unused name in the same folder, so the final rename stays on one filesystem."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.{tag}-", dir=path.parent)
    os.close(fd)
    os.unlink(name)
    return Path(name)


def _owned_temp(folder: Path, prefix: str, suffix: str = "") -> tuple[int, Path]:
    """A new temporary file, flocked by this process for as long as the descriptor is open,
    so a cleaner can tell a live registration's file from a killed one's."""
    while True:
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            ours = os.fstat(fd).st_ino == os.stat(name).st_ino
        except FileNotFoundError:
            ours = False
        if ours:
            return fd, Path(name)
        os.close(fd)  # a cleaner removed it before our flock: start again


def owner_alive(path: Path) -> bool:
    """Whether a registration still holds this temporary file (its flock is taken)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def remove_if_owner_gone(path: Path) -> bool | None:
    """Remove a temporary file whose owner's flock is free: True when removed, False when
    its owner still holds it, None when it is already gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            if os.lstat(path).st_ino != os.fstat(fd).st_ino:
                return None  # replaced meanwhile: not the file we judged
        except FileNotFoundError:
            return None
        path.unlink()
        return True
    finally:
        os.close(fd)


def _index_fault(entry: Any, tree: str, key: str) -> str | None:
    """What is wrong with an index entry read from per_view/<tree>/<key>.json, or None."""
    if not isinstance(entry, dict):
        return "is not a JSON object"
    if entry.get("key") != key:
        return f"records key {entry.get('key')!r} but is filed under {key}"
    if entry.get("tree") != tree:
        return f"records tree {entry.get('tree')!r} but is filed under {tree}"
    files = entry.get("files")
    if not isinstance(files, list) or not files:
        return "lists no files"
    for index, item in enumerate(files):
        if not isinstance(item, dict):
            return f"files[{index}] is not an object"
        try:
            _safe_relpath(item.get("path"))
        except ValueError as exc:
            return f"files[{index}] path {item.get('path')!r} {exc}"
        if not isinstance(item.get("sha256"), str) or not SHA256_PATTERN.fullmatch(item["sha256"]):
            return f"files[{index}] ({item['path']}) has no valid sha256"
        for field in ("size", "mtime_ns", "inode"):
            value = item.get(field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                return f"files[{index}] ({item['path']}) has no valid {field}"
    if not isinstance(entry.get("who"), dict):
        return "has no 'who' record"
    return None


def repair_hint() -> str:
    """`store repair` as the user types it; RING is any ring that uses the store."""
    return f"{ringflow_command()} store repair RING"


class WeightsStore:
    """A weights store rooted at `root` (created with mode 0700 if absent)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.objects = self.root / "objects"
        self.per_view = self.root / "per_view"
        self.locks = self.root / "locks"
        self.checked = self.root / "checked"
        self.anchors = StoreAnchors(self.root)
        self._names: dict[tuple[int, int], str] | None = None
        if not self.root.exists():
            self.root.parent.mkdir(parents=True, exist_ok=True)
            with suppress(FileExistsError):
                self.root.mkdir(mode=0o700)
            # mkdir's mode is filtered by the umask; the store must not be readable by others.
            os.chmod(self.root, 0o700)
        for folder in (self.objects, self.per_view, self.locks, self.checked):
            folder.mkdir(exist_ok=True)

    # ----------------------------------------------------------------- lookup

    def _index_path(self, tree: str, key: str) -> Path:
        _require_sha256("tree", tree)
        _require_sha256("key", key)
        return self.per_view / tree / f"{key}.json"

    def _read_index(self, path: Path) -> dict[str, Any]:
        try:
            entry = json.loads(path.read_bytes())
        except ValueError as exc:
            raise StoreError(f"store index {path}: malformed JSON ({exc})") from None
        fault = _index_fault(entry, path.parent.name, path.stem)
        if fault:
            raise StoreError(f"store index {path}: {fault}")
        return entry

    def entry(self, tree: str, key: str) -> dict[str, Any] | None:
        """The index entry of a key under a tree, or None when the key was never registered."""
        path = self._index_path(tree, key)
        try:
            return self._read_index(path)
        except FileNotFoundError:
            return None

    def replay_entry(self, tree: str, key: str) -> dict[str, Any] | None:
        """The index entry of a key, checked against the registration the store's anchors
        recorded: ReplayCheckFailed when the entry is missing or lists other objects (never
        a silent retrain); None when the key was never registered."""
        entry = self.entry(tree, key)
        anchored = self.anchors.registration(key)
        if anchored is None or anchored.get("tree") != tree:
            return entry
        who = anchored.get("who") or {}
        by = f"ring {who.get('ring')}, node {who.get('node')}"
        where = f"per_view/{tree[:12]}…/{key}.json"
        if entry is None:
            raise ReplayCheckFailed("index entry", f"{where} is missing, but the store's "
                                    f"anchors record its registration ({by}): "
                                    f"`{repair_hint()}` restores it")  # fmt: skip
        if not same_files(entry["files"], anchored["files"]):
            raise ReplayCheckFailed("index entry", f"{where} lists other objects than its "
                                    f"registration anchored ({by}): `{repair_hint()}` "
                                    "restores it")  # fmt: skip
        return entry

    def find(self, key: str) -> dict[str, Any] | None:
        """The index entry of a key under any tree, or None."""
        _require_sha256("key", key)
        for tree_dir in sorted(self.per_view.iterdir()):
            path = tree_dir / f"{key}.json"
            try:
                return self._read_index(path)
            except (FileNotFoundError, NotADirectoryError):
                continue
        return None

    # ------------------------------------------------------------------ locks

    @contextmanager
    def key_lock(
        self,
        key: str,
        should_stop: Callable[[], str | None] | None = None,
        poll_s: float = 0.2,
    ) -> Iterator[None]:
        """Hold the exclusive lock of a key; give up with DeadlineReached when should_stop says so.

        The wait is a series of short polls so that a deadline moved while
        waiting ends the wait within about `poll_s`.
        """
        _require_sha256("key", key)
        lock = FileLock(str(self.locks / f"{key}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            while True:
                reason = should_stop() if should_stop is not None else None
                if reason:
                    raise DeadlineReached(reason) from None
                try:
                    lock.acquire(timeout=poll_s, poll_interval=min(0.05, poll_s))
                    break
                except Timeout:
                    continue
        try:
            yield
        finally:
            lock.release()

    @contextmanager
    def _object_lock(self, sha: str) -> Iterator[None]:
        """Hold an object's lock while its links or checked stat change. An flock of our
        own: opening a lock file without truncating it costs a fraction of a replay."""
        fd = os.open(self.locks / f"object-{sha}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock

    # ------------------------------------------------------------ checked stat

    @staticmethod
    def _stat_of(st: os.stat_result) -> dict[str, int]:
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
                "ctime_ns": st.st_ctime_ns}  # fmt: skip

    def _checked_matches(self, sha: str, st: os.stat_result) -> bool:
        """The object's stat is the one at which it last hashed right."""
        try:
            record = json.loads((self.checked / f"{sha}.json").read_bytes())
        except (FileNotFoundError, ValueError):
            return False
        return isinstance(record, dict) and all(
            record.get(k) == v for k, v in self._stat_of(st).items()
        )

    def _record_checked(self, sha: str, st: os.stat_result) -> None:
        """Record the stat of an object known intact, under its lock (so in place, not by a
        rename, which costs more than the rest of a replay). No fsync: a record lost or torn
        in a crash does not parse or match, and only costs one more hash."""
        # Padded to one width and written over the old record: no truncation either.
        data = json.dumps(self._stat_of(st)).encode().ljust(CHECKED_WIDTH)
        fd = os.open(self.checked / f"{sha}.json", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)

    def _relinked(self, sha: str, change: Callable[[], Any]) -> Any:
        """Run `change` (it adds or removes a hard link of the object, which moves its
        ctime), keeping the checked stat current when the object was intact before."""
        obj = self.objects / sha
        with self._object_lock(sha):
            try:
                trusted = self._checked_matches(sha, os.lstat(obj))
            except FileNotFoundError:
                trusted = False
            done = change()
            if trusted:
                with suppress(FileNotFoundError):
                    self._record_checked(sha, os.lstat(obj))
        return done

    # ------------------------------------------------------------ acceptance

    def accept(
        self,
        weights_root: str | os.PathLike,
        paths: Iterable[str],
        size_limit_bytes: int,
        supplied: Iterable[str] = (),
    ) -> list[dict[str, Any]]:
        """Check a training run's declared weights: [{"path", "size"}] or AcceptanceError.

        Every declared path must exist under weights_root as a regular file (no
        link anywhere on its way) no larger than size_limit_bytes, and the folders
        that hold them may hold nothing else (besides the `supplied` files that came
        with the submission, and caches): a replay would not see an undeclared file.
        All faults are reported together, each naming its file.
        """
        if isinstance(size_limit_bytes, bool) or not isinstance(size_limit_bytes, int):
            raise InputError(f"weights size limit must be whole bytes, got {size_limit_bytes!r}")
        root = Path(weights_root)
        problems: list[str] = []
        accepted: list[dict[str, Any]] = []
        seen: set[str] = set()
        for raw in paths:
            try:
                rel = _safe_relpath(raw)
            except ValueError as exc:
                problems.append(f"{raw!r} {exc}")
                continue
            if rel in seen:
                continue
            seen.add(rel)
            fault, size = self._acceptance_fault(root, rel, size_limit_bytes)
            if fault:
                problems.append(f"{rel} {fault}")
            else:
                accepted.append({"path": rel, "size": size})
        if not seen and not problems:
            problems.append("no weights files were declared")
        undeclared = self._undeclared(root, seen, set(supplied))
        if undeclared:
            problems.append(
                "undeclared files in the weights folder (a replay would not get them; declare "
                "them in ARTIFACTS.json or write them elsewhere): " + ", ".join(undeclared)
            )
        if problems:
            raise AcceptanceError(f"weights in {root} not accepted: " + "; ".join(problems))
        return accepted

    @staticmethod
    def _undeclared(root: Path, declared: set[str], supplied: set[str]) -> list[str]:
        folders = {PurePosixPath(rel).parent for rel in declared}
        found: set[str] = set()
        for folder in folders:
            base = root / folder
            if base.is_symlink() or not base.is_dir():
                continue
            # By descriptor: a program chose these names and this depth (docs/limits.md).
            try:
                for entry in walk(base, unreadable="skip"):
                    if entry.is_dir:
                        continue
                    rel = PurePosixPath(folder, *entry.parts).as_posix()
                    if rel not in declared and rel not in supplied and not is_cache(rel):
                        found.add(escape_name(rel))
            except TreeLimit as exc:
                found.add(f"{escape_name(folder.as_posix())} ({exc.reason})")
        return sorted(found)

    @staticmethod
    def _acceptance_fault(root: Path, rel: str, size_limit_bytes: int) -> tuple[str | None, int]:
        parts = PurePosixPath(rel).parts
        current = root
        for depth, part in enumerate(parts):
            current = current / part
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                return "does not exist", 0
            except NotADirectoryError:
                return "lies under something that is not a folder", 0
            last = depth == len(parts) - 1
            if stat.S_ISLNK(st.st_mode):
                if last:
                    return "is a symbolic link, not a regular file", 0
                return f"lies under a symbolic link ({PurePosixPath(*parts[: depth + 1])})", 0
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file", 0
        if st.st_size > size_limit_bytes:
            return (
                f"is {st.st_size} bytes, over the size limit of {size_limit_bytes} bytes",
                st.st_size,
            )
        return None, st.st_size

    # ----------------------------------------------------------- registration

    def register(
        self,
        tree: str,
        key: str,
        weights_root: str | os.PathLike,
        paths: Iterable[str],
        who: dict[str, Any],
        size_limit_bytes: int,
        supplied: Iterable[str] = (),
    ) -> tuple[dict[str, Any], bool]:
        """Accept and store a training run's weights under a key: (entry, created).

        The first writer wins: when the key already has an entry it is
        returned with created=False and nothing is written. Callers hold the key lock.
        """
        index_path = self._index_path(tree, key)
        if not isinstance(who, dict) or any(field not in who for field in WHO_FIELDS):
            raise InputError(f"weights store: who must name {', '.join(WHO_FIELDS)}; got {who!r}")
        existing = self.entry(tree, key)
        if existing is not None:
            return existing, False
        accepted = self.accept(weights_root, paths, size_limit_bytes, supplied)
        files = []
        for item in accepted:
            sha, st = self._store_object(Path(weights_root) / item["path"])
            files.append(
                {
                    "path": item["path"],
                    "size": st.st_size,
                    "sha256": sha,
                    "mtime_ns": st.st_mtime_ns,
                    "inode": st.st_ino,
                }
            )
        entry = {
            "key": key,
            "tree": tree,
            "files": files,
            "who": {field: who[field] for field in WHO_FIELDS},
            "registered_at": time.time(),
        }
        # Anchored first: a kill before the entry is written leaves a registration that
        # `store repair` restores, never a key that trains again unnoticed.
        self.anchors.anchor_registration(tree, key, files, entry["who"])
        if not self._write_index_once(index_path, entry):
            return self._read_index(index_path), False
        return entry, True

    def _store_object(self, source: Path) -> tuple[str, os.stat_result]:
        """Copy a file into objects/<sha256>; return its hash and the object's stat."""
        fd, tmp = _owned_temp(self.objects, ".incoming-")
        try:
            sha = _copy_hashing(source, fd)
            os.fchmod(fd, OBJECT_MODE)
            final = self.objects / sha
            with self._object_lock(sha):
                try:
                    os.link(tmp, final)
                except FileExistsError:
                    if not self._object_intact(final, sha):
                        # A damaged object must not be trusted by a new entry's stat record.
                        os.replace(tmp, final)
                tmp.unlink(missing_ok=True)
                fsync_dir(self.objects)
                st = os.stat(final)
                self._record_checked(sha, st)
            return sha, st
        finally:
            tmp.unlink(missing_ok=True)
            os.close(fd)  # the flock goes last: the file is gone by then

    @staticmethod
    def _object_intact(path: Path, sha: str) -> bool:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        return stat.S_ISREG(st.st_mode) and sha256_file(path) == sha

    @staticmethod
    def _write_index_once(path: Path, entry: dict[str, Any]) -> bool:
        """Write an index entry only if none exists (link, not rename, so the first wins)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        text = (json.dumps(entry, indent=2, sort_keys=True) + "\n").encode()
        fd, tmp = _owned_temp(path.parent, f".{path.name}.", ".tmp")
        try:
            os.write(fd, text)
            os.fsync(fd)
            os.fchmod(fd, OBJECT_MODE)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            fsync_dir(path.parent)
            return True
        finally:
            tmp.unlink(missing_ok=True)
            os.close(fd)

    # ----------------------------------------------------------------- replay

    def replay_into(
        self, entry: dict[str, Any], dest_root: str | os.PathLike, verify: str = "stat"
    ) -> str:
        """Place a registered state's files read-only under dest_root: "hardlink" or "copy".

        Every file passes the replay check before any is placed; a missing or
        altered object raises ReplayCheckFailed naming the file. verify="full"
        rehashes every object.
        """
        if verify not in VERIFY_MODES:
            raise InputError(f"replay verify must be one of {VERIFY_MODES}, got {verify!r}")
        if not isinstance(entry, dict):
            raise StoreError(f"store entry must be a JSON object, got {type(entry).__name__}")
        fault = _index_fault(entry, entry.get("tree"), entry.get("key"))
        if fault:
            raise StoreError(f"store entry for key {entry.get('key')!r}: {fault}")
        checked = [
            (item, self._replay_check(item, full=verify == "full")) for item in entry["files"]
        ]
        dest = Path(dest_root)
        dest.mkdir(parents=True, exist_ok=True)
        modes = {self._place(item, st, dest / item["path"]) for item, st in checked}
        return "copy" if "copy" in modes else "hardlink"

    def _replay_check(self, item: dict[str, Any], full: bool) -> os.stat_result:
        rel, sha = item["path"], item["sha256"]
        obj = self.objects / sha
        try:
            st = os.lstat(obj)
        except FileNotFoundError:
            raise ReplayCheckFailed(rel, f"is missing from the store (object {sha})") from None
        if not stat.S_ISREG(st.st_mode):
            raise ReplayCheckFailed(rel, f"is not a regular file in the store (object {sha})")
        if st.st_size != item["size"]:
            raise ReplayCheckFailed(
                rel,
                f"was altered in the store: object {sha} is {st.st_size} bytes, "
                f"registered as {item['size']}",
            )
        with self._object_lock(sha):
            st = os.lstat(obj)
            registered = (st.st_mtime_ns, st.st_ino) == (item["mtime_ns"], item["inode"])
            if full or not registered or not self._checked_matches(sha, st):
                actual = sha256_file(obj)
                if actual != sha:
                    raise ReplayCheckFailed(
                        rel,
                        f"does not match its registered sha256 {sha} (it now hashes to {actual})",
                    )
                self._record_checked(sha, st)
        return st

    def _place(self, item: dict[str, Any], checked: os.stat_result, dest: Path) -> str:
        """Hardlink (or copy) one checked object to dest, replacing anything there."""
        rel, sha = item["path"], item["sha256"]
        obj = self.objects / sha
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        tmp = _temp_beside(dest, "replay")
        try:
            try:
                self._link_checked(item, checked, tmp, dest)
                return "hardlink"
            except OSError as exc:
                if exc.errno not in LINK_FALLBACK_ERRNOS:
                    raise
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, OBJECT_MODE)
                try:
                    copied = _copy_hashing(obj, fd)
                finally:
                    os.close(fd)
                if copied != sha:
                    raise ReplayCheckFailed(
                        rel, f"does not match its registered sha256 {sha} (copy hashed {copied})"
                    ) from None
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        return "copy"

    def _link_checked(
        self, item: dict[str, Any], checked: os.stat_result, tmp: Path, dest: Path
    ) -> None:
        """Hard link a checked object to dest (through tmp) under its lock, and record its
        new ctime (the link and the rename both move it): the object is the one checked,
        rehashed when another link moved its stat meanwhile."""
        rel, sha = item["path"], item["sha256"]
        obj = self.objects / sha
        with self._object_lock(sha):
            now = os.lstat(obj)
            if now.st_ino != checked.st_ino:
                raise ReplayCheckFailed(rel, f"was replaced in the store during replay ({sha})")
            moved = self._stat_of(now) != self._stat_of(checked)
            if moved and not self._checked_matches(sha, now):
                actual = sha256_file(obj)
                if actual != sha:
                    raise ReplayCheckFailed(rel, f"was altered in the store during replay "
                                            f"(now hashes to {actual})")  # fmt: skip
            os.link(obj, tmp)
            os.replace(tmp, dest)
            self._record_checked(sha, os.lstat(obj))

    # --------------------------------------------------------------- training

    def make_private(self, dest_root: str | os.PathLike, paths: Iterable[str]) -> list[str]:
        """Give a training run writable weights: store hardlinks become private copies.

        Under each relative path (a file or a folder), a file that shares its
        inode with a store object, or a link into the store, is replaced by a
        private writable copy; other read-only files become owner-writable.
        Returns the relative paths that were copied.
        """
        dest = Path(dest_root)
        copied: list[str] = []
        object_inodes: set[tuple[int, int]] | None = None
        self._names = None
        objects_real = os.path.realpath(self.objects)
        for raw in paths:
            try:
                rel = _safe_relpath(raw)
            except ValueError as exc:
                raise InputError(f"weights path {raw!r} {exc}") from None
            for path in self._files_under(dest / rel):
                st = os.lstat(path)
                source: Path | None = None
                if stat.S_ISLNK(st.st_mode):
                    target = os.path.realpath(path)
                    if os.path.commonpath([target, objects_real]) == objects_real:
                        source = Path(target)
                elif stat.S_ISREG(st.st_mode):
                    if st.st_nlink > 1:
                        if object_inodes is None:
                            object_inodes = self._object_inodes()
                        if (st.st_dev, st.st_ino) in object_inodes:
                            source = path
                    if source is None and not st.st_mode & stat.S_IWUSR:
                        os.chmod(path, stat.S_IMODE(st.st_mode) | stat.S_IWUSR)
                if source is not None:
                    tmp = _temp_beside(path, "private")
                    try:
                        shutil.copyfile(source, tmp)
                        os.chmod(tmp, PRIVATE_MODE)
                        sha = self._object_name(os.lstat(source))
                        if sha is None:
                            os.replace(tmp, path)
                        else:
                            self._relinked(sha, lambda tmp=tmp, path=path: os.replace(tmp, path))
                    finally:
                        tmp.unlink(missing_ok=True)
                    copied.append(path.relative_to(dest).as_posix())
        return copied

    def release_links(self, root: str | os.PathLike) -> list[str]:
        """Remove every file under root that is a hard link to a store object.

        Called when an execution ends: a replay's links must not outlive it, or a process
        writing into the ring folder would write into the store. Returns what was removed.
        """
        root = Path(root)
        if not root.is_dir():
            return []
        removed = []
        self._names = None
        for dirpath, _dirnames, filenames in os.walk(root):
            for name in filenames:
                path = Path(dirpath) / name
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
                    continue
                sha = self._object_name(st)
                if sha is not None:
                    self._relinked(sha, path.unlink)
                    removed.append(path.relative_to(root).as_posix())
        return removed

    def _object_name(self, st: os.stat_result) -> str | None:
        """The object a file is a hard link of, or None."""
        if self._names is None:
            self._names = self._object_names()  # once per walk (reset by its caller)
        return self._names.get((st.st_dev, st.st_ino))

    @staticmethod
    def _files_under(path: Path) -> list[Path]:
        if path.is_symlink() or path.is_file():
            return [path]
        if not path.is_dir():
            return []
        found = []
        for folder, _, names in os.walk(path):
            found.extend(Path(folder) / name for name in names)
        return found

    def _object_inodes(self) -> set[tuple[int, int]]:
        return set(self._object_names())

    def _object_names(self) -> dict[tuple[int, int], str]:
        device = os.stat(self.objects).st_dev
        with os.scandir(self.objects) as entries:
            return {(device, entry.inode()): entry.name for entry in entries
                    if not entry.name.startswith(".")}  # fmt: skip

    # ----------------------------------------------------------------- verify

    def verify(self) -> list[str]:
        """Rehash every object that an index entry references; one problem string per fault."""
        problems: list[str] = []
        uses: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for tree_dir in sorted(self.per_view.iterdir()):
            if not tree_dir.is_dir():
                problems.append(f"store index: unexpected file {tree_dir}")
                continue
            for index_path in sorted(tree_dir.glob("*.json")):
                try:
                    entry = self._read_index(index_path)
                except StoreError as exc:
                    problems.append(str(exc))
                    continue
                for item in entry["files"]:
                    uses.setdefault(item["sha256"], []).append((entry["key"], item))
        present = {}
        for sha in uses:
            obj = self.objects / sha
            if obj.is_file() and not obj.is_symlink():
                present[sha] = str(obj)
        try:
            hashes = hash_files(present.values())
        except InputError as exc:
            return [*problems, f"store objects could not be read: {exc}"]
        for sha, users in sorted(uses.items()):
            for key, item in users:
                where = f"{item['path']} (key {key}, object {sha})"
                if sha not in present:
                    problems.append(f"{where}: object is missing from the store")
                elif hashes[present[sha]] != sha:
                    problems.append(
                        f"{where}: object was altered (now hashes to {hashes[present[sha]]})"
                    )
                elif os.stat(present[sha]).st_size != item["size"]:
                    problems.append(f"{where}: object size differs from the registered size")
        problems += [
            f"leftover of an interrupted registration: {path} (`{repair_hint()}` removes it)"
            for path in self.leftovers()
            if not owner_alive(path)  # a registration of another ring, still copying
        ]
        return problems

    def remove_dead_leftovers(self) -> tuple[list[Path], list[Path]]:
        """(removed, in use): remove every leftover whose registration is gone."""
        removed, in_use = [], []
        for path in self.leftovers():
            done = remove_if_owner_gone(path)
            if done:
                removed.append(path)
            elif done is False:
                in_use.append(path)
        if removed:
            fsync_dir(self.objects)
        return removed, in_use

    def leftovers(self) -> list[Path]:
        """Temporary files of registrations in objects/ or per_view/ (a live one's too)."""
        found = sorted(self.objects.glob(".incoming-*"))
        for tree_dir in sorted(self.per_view.iterdir()):
            if tree_dir.is_dir():
                found += sorted(tree_dir.glob(".*.tmp"))
        return found
