"""Confine the current process with Linux Landlock: read only where allowed, write only where allowed,
execute nothing, and open no TCP connection. Irreversible for the process (and its threads).

Used by the embedded engine's child process, so that even SQL that got past the statement check
cannot read the app's files or secrets, write outside the engine's scratch folder, or reach the
network. The `landlock` package on PyPI covers filesystem rules only; network rules (Landlock ABI 4)
are why this is a few syscalls of our own.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from dataclasses import dataclass

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# In the kernel's bit order (include/uapi/linux/landlock.h).
_FS_RIGHTS = [
    "EXECUTE", "WRITE_FILE", "READ_FILE", "READ_DIR", "REMOVE_DIR", "REMOVE_FILE", "MAKE_CHAR", "MAKE_DIR",
    "MAKE_REG", "MAKE_SOCK", "MAKE_FIFO", "MAKE_BLOCK", "MAKE_SYM", "REFER", "TRUNCATE", "IOCTL_DEV",
]  # fmt: skip
FS = {name: 1 << bit for bit, name in enumerate(_FS_RIGHTS)}
# Rights each ABI version knows; asking for an unknown one makes the kernel refuse the ruleset.
_FS_BY_ABI = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2

READ = FS["READ_FILE"] | FS["READ_DIR"]
_FILE_ONLY = FS["EXECUTE"] | FS["WRITE_FILE"] | FS["READ_FILE"] | FS["TRUNCATE"] | FS["IOCTL_DEV"]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class SandboxStatus:
    applied: bool
    abi: int
    network_blocked: bool
    reason: str = ""

    def describe(self) -> str:
        if not self.applied:
            return f"not sandboxed: {self.reason}"
        network = "no TCP" if self.network_blocked else "TCP not restricted (Landlock ABI < 4)"
        return f"Landlock ABI {self.abi}: files confined, no exec, {network}"


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is unavailable."""
    result = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(int(result), 0)


def confine(*, read: Iterable[str], write: Iterable[str]) -> SandboxStatus:
    """Allow reading under `read`, reading and writing under `write`, nothing else, for good."""
    abi = landlock_abi()
    if abi < 1:
        return SandboxStatus(False, 0, False, "the kernel has no Landlock support")
    libc = _libc()
    handled_fs = sum(FS[name] for name in _FS_RIGHTS[: _FS_BY_ABI.get(abi, len(_FS_RIGHTS))])
    handled_net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    attr = _RulesetAttr(handled_fs, handled_net, 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 4 else 8  # ABI 1-3 know only the fs field
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        return SandboxStatus(False, abi, False, f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        write_rights = handled_fs & ~FS["EXECUTE"]
        for paths, rights in ((read, READ), (write, write_rights)):
            for path in paths:
                _allow(libc, ruleset, path, rights & handled_fs)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return SandboxStatus(False, abi, False, f"prctl(NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            return SandboxStatus(False, abi, False, f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return SandboxStatus(True, abi, bool(handled_net))


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    if not os.path.exists(path):
        return
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(path):
            rights &= _FILE_ONLY
        rule = _PathBeneathAttr(rights, fd)
        if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
