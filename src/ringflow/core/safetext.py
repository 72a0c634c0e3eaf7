"""Names and text a candidate controls, made safe to record and to show (docs/limits.md).

A program or an engineer session chooses its file names and writes its own logs: a name
may hold bytes that are not UTF-8, newlines or terminal escape sequences. Two rules, one
function each, used everywhere such text leaves ringflow:

- `escape_name`: a file name (or a relative path) as it goes into a JSON record or a
  reason. Lossless and plain ASCII-safe text: a backslash is written `\\\\`, a byte that
  is not UTF-8 `\\xNN`, a control character `\\n`, `\\t`, `\\r` or `\\xNN` (`\\uNNNN`
  above U+00FF).
- `printable`: text shown to the user (summary, status, progress line, digest,
  summary.txt). Control characters, line separators, bidirectional overrides and
  undecodable bytes are escaped as above; backslashes are left as they are, so text
  that already holds an escaped name reads the same.
"""

from __future__ import annotations

import os
import re

_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
# C0 and C1 controls, DEL, line and paragraph separators, bidirectional controls,
# zero-width characters (a name that looks like another), the surrogates that stand for
# undecodable bytes (surrogateescape).
_UNSAFE = (
    "\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff\ud800-\udfff"
)
_NAME_RE = re.compile(f"[{_UNSAFE}\\\\]")
_TEXT_RE = re.compile(f"[{_UNSAFE}]")
_TEXT_KEEP_NEWLINES_RE = re.compile(f"[{_UNSAFE.replace(chr(0) + '-' + chr(0x1F), '')}"
                                    "\x00-\x09\x0b-\x1f]")  # fmt: skip


def _escape_char(match: re.Match) -> str:
    ch = match.group()
    if ch == "\\":
        return "\\\\"
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # one undecodable byte, as surrogateescape carries it
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def as_text(value: str | bytes | os.PathLike) -> str:
    """A name or text as str; bytes that are not UTF-8 become surrogates (lossless)."""
    value = os.fspath(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def escape_name(name: str | bytes | os.PathLike) -> str:
    """A file name or relative path as recorded in JSON and reasons (see the module)."""
    return _NAME_RE.sub(_escape_char, as_text(name))


def log_lines(data: bytes) -> list[str]:
    """The non-empty lines of a log a program wrote, stripped, as text to pass through
    `printable`: a line ends at a newline only (a carriage return or a line separator
    inside it is shown escaped, never taken as an end that hides what came before), and
    bytes that are not UTF-8 stay lossless (shown `\\xNN`)."""
    text = data.decode("utf-8", "surrogateescape")
    return [line.strip() for line in text.split("\n") if line.strip()]


def last_log_lines(data: bytes, count: int) -> list[str]:
    """The last `count` of log_lines(data), decoding only the tail they lie in: a log's
    tail of many short lines would otherwise become as many strings."""
    want = count
    while True:
        start, end, found = len(data), len(data), 0
        while found < want:
            cut = data.rfind(b"\n", 0, end)
            found += bool(data[cut + 1 : end].strip())
            start, end = cut + 1, cut
            if cut < 0:
                break  # the first line read: the whole log is in
        lines = log_lines(data[start:])
        # A line blank only to str.strip (a Unicode space) counted above: look further.
        if len(lines) >= count or start == 0:
            return lines[-count:] if count else []
        want *= 2


def printable(text: object, keep_newlines: bool = False) -> str:
    """Text for the user's terminal or summary.txt, control characters escaped."""
    pattern = _TEXT_KEEP_NEWLINES_RE if keep_newlines else _TEXT_RE
    return pattern.sub(_escape_char, as_text(text) if isinstance(text, bytes) else str(text))


def is_plain_name(name: str | bytes) -> bool:
    """Whether a name needs no escaping (valid UTF-8, no control characters, no backslash)."""
    text = as_text(name)
    return _NAME_RE.search(text) is None
