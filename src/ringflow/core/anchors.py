"""The store's anchors: what the store vouches for, out of reach of an editor of `runs/`
(docs/integrity.md).

Under the store root:

    anchors/secret               32 random bytes (0600), created once; the key of every MAC
    anchors/heads.jsonl          one line per ledger append of a ring: ring, lock, seq, hash
    anchors/registrations.jsonl  one line per registration or quarantine of a weights key
    locks/anchors.lock           held while a line is appended

Every line carries `mac`, an HMAC-SHA256 under the secret of the line without it. A ring's
ledger lines are signed with the same secret (`sign_record`), so a ledger rebuilt from the
ring folder alone, however well chained, does not verify; the heads catch a ledger cut
short or rolled back to an older copy.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from .brief_lock import brief_lock
from .jsonio import canonical_json, fsync_dir

SECRET_BYTES = 32
HEADS = "heads.jsonl"
REGISTRATIONS = "registrations.jsonl"
REGISTERED = "registered"
QUARANTINED = "quarantined"

_secrets: dict[str, bytes] = {}
_registrations: dict[str, tuple[tuple[int, int, int], dict[str, dict], list[str]]] = {}


class StoreAnchors:
    """The anchors of the store rooted at `store_root` (nothing is created until written)."""

    def __init__(self, store_root: str | os.PathLike):
        self.store = Path(store_root)
        self.folder = self.store / "anchors"
        self.secret_path = self.folder / "secret"
        self.heads_path = self.folder / HEADS
        self.registrations_path = self.folder / REGISTRATIONS
        self._lock = brief_lock(self.store / "locks" / "anchors.lock")

    # ----------------------------------------------------------------- secret

    def has_secret(self) -> bool:
        return self.secret_path.is_file()

    def secret(self, create: bool = True) -> bytes | None:
        """The store's secret; created once (0600, whole or not at all) when `create`."""
        cached = _secrets.get(str(self.secret_path))
        if cached is not None and self.secret_path.is_file():
            return cached  # (a store removed and made again at the same path has a new one)
        try:
            data = self.secret_path.read_bytes()
        except FileNotFoundError:
            if not create:
                return None
            data = self._create_secret()
        if len(data) != SECRET_BYTES:
            raise ValueError(f"{self.secret_path}: not a store secret ({len(data)} bytes)")
        _secrets[str(self.secret_path)] = data
        return data

    def _create_secret(self) -> bytes:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".secret-", dir=self.folder)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, secrets.token_bytes(SECRET_BYTES))
            os.fsync(fd)
            os.close(fd)
            # A link, not a rename: when two writers race, the first secret wins.
            with suppress(FileExistsError):
                os.link(tmp, self.secret_path)
            fsync_dir(self.folder)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return self.secret_path.read_bytes()

    def mac(self, obj: dict[str, Any], secret: bytes | None = None) -> str:
        key = secret if secret is not None else self.secret()
        body = {k: v for k, v in obj.items() if k != "mac"}
        return hmac.new(key, canonical_json(body), hashlib.sha256).hexdigest()

    def signed(self, obj: dict[str, Any], secret: bytes) -> bool:
        mac = obj.get("mac")
        return isinstance(mac, str) and hmac.compare_digest(mac, self.mac(obj, secret))

    # ---------------------------------------------------------------- ledgers

    def sign_record(self, identity: dict[str, str], record: dict[str, Any]) -> str:
        """The signature of a ledger record (without its hash and signature) of one ring."""
        body = {k: v for k, v in record.items() if k not in ("hash", "sig")}
        return self.mac({"ring": identity, "record": body})

    def record_signed(self, identity: dict[str, str], record: dict[str, Any],
                      secret: bytes) -> bool:  # fmt: skip
        sig = record.get("sig")
        if not isinstance(sig, str):
            return False
        body = {k: v for k, v in record.items() if k not in ("hash", "sig")}
        return hmac.compare_digest(sig, self.mac({"ring": identity, "record": body}, secret))

    def anchor_head(self, identity: dict[str, str], ring_dir: str, seq: int, digest: str) -> None:
        # Not synced: the line it anchors was synced first, so a crash can only lose the
        # newest heads (a shorter watch on the ledger), never anchor one the ledger lost.
        self._append(self.heads_path, {**identity, "ring_dir": ring_dir, "seq": seq,
                                       "hash": digest}, durable=False)  # fmt: skip

    def heads(self, identity: dict[str, str]) -> tuple[list[tuple[int, str]], list[str]]:
        """([(seq, hash)] anchored for one ring, in order; problems of its lines)."""
        secret = self.secret(create=False)
        found, problems = [], []
        if secret is None:
            return found, problems
        for number, line in self._lines(self.heads_path):
            if line.get("ring") != identity["ring"] or line.get("lock") != identity["lock"]:
                continue
            if not self.signed(line, secret):
                problems.append(f"{self.heads_path} line {number}: its MAC does not match "
                                "(edited)")  # fmt: skip
                continue
            found.append((line.get("seq"), line.get("hash")))
        return found, problems

    # ---------------------------------------------------------- registrations

    def anchor_registration(self, tree: str, key: str, files: list[dict], who: dict) -> None:
        self._append(self.registrations_path, {
            "event": REGISTERED, "key": key, "tree": tree, "who": who,
            "files": [{k: f[k] for k in ("path", "sha256", "size")} for f in files],
        })  # fmt: skip

    def anchor_quarantine(self, key: str, reason: str) -> None:
        self._append(self.registrations_path, {"event": QUARANTINED, "key": key,
                                               "reason": reason})  # fmt: skip

    def registrations(self) -> tuple[dict[str, dict], list[str]]:
        """({key: its last registration line, or none once quarantined}, problems)."""
        path = self.registrations_path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return {}, []
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        hit = _registrations.get(str(path))
        if hit is not None and hit[0] == stamp:
            return hit[1], hit[2]
        secret = self.secret(create=False)
        found: dict[str, dict] = {}
        problems: list[str] = []
        for number, line in self._lines(path):
            if secret is None or not self.signed(line, secret):
                problems.append(f"{path} line {number}: its MAC does not match (edited)")
                continue
            if line.get("event") == REGISTERED:
                found[line["key"]] = line
            elif line.get("event") == QUARANTINED:
                found.pop(line.get("key"), None)
        _registrations[str(path)] = (stamp, found, problems)
        return found, problems

    def registration(self, key: str) -> dict | None:
        return self.registrations()[0].get(key)

    # ------------------------------------------------------------------ files

    def _append(self, path: Path, line: dict[str, Any], durable: bool = True) -> None:
        secret = self.secret()
        line = {**line, "ts": time.time()}
        data = canonical_json({**line, "mac": self.mac(line, secret)}) + b"\n"
        (self.store / "locks").mkdir(exist_ok=True)
        with self._lock:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)

    @staticmethod
    def _lines(path: Path) -> list[tuple[int, dict]]:
        try:
            raw = path.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for number, line in enumerate(raw, start=1):
            try:
                record = json.loads(line)
            except ValueError:
                record = {"unparsed": True}
            if isinstance(record, dict):
                out.append((number, record))
        return out


def same_files(entry_files: list[dict], anchored_files: list[dict]) -> bool:
    """An index entry lists exactly the (path, sha256) its registration anchored."""
    return sorted((f.get("path"), f.get("sha256")) for f in entry_files) == sorted(
        (f.get("path"), f.get("sha256")) for f in anchored_files
    )
