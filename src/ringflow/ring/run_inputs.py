"""The inputs folder one run reads: a fresh copy, made the same way for every kind of run.

A view-blind run must not be told from a real one by how its files were made. So no run
reads the ring's snapshot (hard links of the task's files) or a disguised copy directly:
each gets its own copy of one or the other in its box, made in one order (sorted names,
folders before their files), files 0444 and folders 0755, every file's access and
modification times those of the real view's snapshot file of the same name. Link count (1),
change time (the run's start), modification time, inode order and the mount table are
then alike for both kinds of run. The copy is made in the kernel (`copy_file_range`),
which shares the blocks (a reflink) on file systems that can; the cost elsewhere is stated
in docs/isolation.md.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..core.errors import SandboxError

CHUNK = 1 << 30


def fresh_inputs(source: Path, dest: Path, times_from: Path) -> Path:
    """Copy source (a snapshot or a disguised copy) into dest, which must not exist.

    `times_from`: the real view's snapshot, whose files' times every copy takes (a file it
    lacks keeps source's). A failure is the machine's (SandboxError), never the program's."""
    try:
        dest.mkdir(mode=0o755)
        for dirpath, dirnames, filenames in os.walk(source):
            dirnames.sort()
            rel = Path(dirpath).relative_to(source)
            for name in sorted(filenames):
                _copy_file(Path(dirpath, name), dest / rel / name, times_from / rel / name)
            for name in dirnames:
                (dest / rel / name).mkdir(mode=0o755)
        for dirpath, _, _ in os.walk(dest):
            os.chmod(dirpath, 0o755)
    except OSError as exc:
        raise SandboxError(f"cannot copy the view's inputs for the run: {exc}") from None
    return dest


def _copy_file(src: Path, dst: Path, times: Path) -> None:
    if not stat.S_ISREG(os.lstat(src).st_mode):
        raise OSError(f"{src} is not a regular file")  # never opened: a FIFO would block
    with open(os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as reader:
        st = os.fstat(reader.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{src} is not a regular file")
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            left = st.st_size
            while left > 0:
                done = _copy_range(reader.fileno(), fd, min(left, CHUNK))
                if done == 0:
                    break  # the source shrank: the snapshot check after the run says so
                left -= done
        finally:
            os.close(fd)
    try:
        reference = os.stat(times)
    except FileNotFoundError:
        reference = st
    os.utime(dst, ns=(reference.st_atime_ns, reference.st_mtime_ns), follow_symlinks=False)


def _copy_range(src_fd: int, dst_fd: int, count: int) -> int:
    try:
        return os.copy_file_range(src_fd, dst_fd, count)
    except OSError:
        # Not supported between these file systems: an ordinary copy of the same bytes.
        data = memoryview(os.read(src_fd, min(count, 1 << 24)))
        size = len(data)
        while data:
            data = data[os.write(dst_fd, data) :]
        return size
