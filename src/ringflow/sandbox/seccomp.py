"""A seccomp filter that refuses the kernel keyring calls, for bubblewrap's --seccomp.

Where a root-mode run cannot have a user namespace of its own (sandbox/identity.py), its
uid's keyrings would be shared with every other run: then add_key, request_key and keyctl
fail with EPERM instead (docs/isolation.md). The classic BPF program is built here, so no
library is needed: check the architecture, load the call number, compare.
"""

from __future__ import annotations

import os
import struct

# AUDIT_ARCH_* and the (add_key, request_key, keyctl) numbers of each architecture.
ARCHES = {
    "x86_64": (0xC000003E, (248, 249, 250)),
    "aarch64": (0xC00000B7, (217, 218, 219)),
}
X32_BIT = 0x40000000  # x32 calls are x86_64's numbers with this bit set

LD_W_ABS, ALU_AND_K, JEQ_K, RET_K = 0x20, 0x54, 0x15, 0x06
ALLOW = 0x7FFF0000
ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
OFFSET_NR, OFFSET_ARCH = 0, 4


def supported() -> bool:
    return os.uname().machine in ARCHES


def keyring_filter(machine: str | None = None) -> bytes:
    """The filter for this machine: keyring calls fail with EPERM, calls of another
    architecture (32-bit compat) with ENOSYS, everything else is allowed."""
    arch, numbers = ARCHES[machine or os.uname().machine]
    program: list[tuple[int, int, int, int]] = [(LD_W_ABS, 0, 0, OFFSET_ARCH)]
    # Foreign architecture: jump over everything to the ENOSYS return at the end.
    body = [(LD_W_ABS, 0, 0, OFFSET_NR)]
    if arch == ARCHES["x86_64"][0]:
        body.append((ALU_AND_K, 0, 0, 0xFFFFFFFF & ~X32_BIT))
    for index, number in enumerate(numbers):
        # Jump to the EPERM return, which follows the ALLOW after the comparisons.
        body.append((JEQ_K, len(numbers) - index, 0, number))
    body += [(RET_K, 0, 0, ALLOW), (RET_K, 0, 0, ERRNO | EPERM)]
    program.append((JEQ_K, 0, len(body), arch))
    program += body
    program.append((RET_K, 0, 0, ERRNO | ENOSYS))
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


def filter_fd(machine: str | None = None) -> int:
    """A pipe's read end holding the filter (bubblewrap reads it before the program runs)."""
    data = keyring_filter(machine)
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, data)  # far below a pipe's capacity
    finally:
        os.close(write_fd)
    return read_fd
