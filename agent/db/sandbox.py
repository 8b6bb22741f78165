"""Confine the current process for good: Linux Landlock for files, TCP, signals and abstract Unix sockets,
and a seccomp filter for the sockets Landlock cannot see. Irreversible for the process and its threads.

Used by the embedded engine's child process, so that even SQL that got past the statement check (or
code that took over the engine) cannot read the app's files or secrets, write outside the engine's
scratch folder, execute anything, signal or connect to processes outside the sandbox, or reach the
network. The `landlock` package on PyPI covers filesystem rules only; network rules (Landlock ABI 4)
and scopes (ABI 6) are why this is a few syscalls of our own.

Landlock has no UDP, raw or netlink rules, and before ABI 9 it does not check connect() to a named
Unix socket (a Docker or D-Bus socket, say). The engine talks to the app over a socket pair it
inherits and needs no new socket, so the seccomp filter refuses socket() for every family and
socketpair() for all but AF_UNIX, with EACCES rather than a kill, so that the engine sees an
ordinary error. It also refuses io_uring_setup: io_uring can create sockets without socket().
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

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
# How many of those rights each ABI knows; asking for an unknown one makes the kernel refuse the ruleset.
# From the kernel's Documentation/userspace-api/landlock.rst ("Previous limitations") and
# include/uapi/linux/landlock.h: ABI 2 added REFER, 3 TRUNCATE, 4 TCP rules, 5 IOCTL_DEV, 6 the scopes,
# 7 only logging flags for landlock_restrict_self(). (8 adds a thread-sync flag, 9 RESOLVE_UNIX, not used here.)
_FS_BY_ABI = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16, 6: 16, 7: 16}
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2  # "DOC: scope" in include/uapi/linux/landlock.h

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
    applied: bool  # Landlock is in force: files confined, nothing executed
    abi: int
    network_blocked: bool  # no TCP (Landlock ABI >= 4)
    reason: str = ""  # why Landlock is not in force
    scoped: bool = False  # no signal or abstract-socket connection outside the sandbox (Landlock ABI >= 6)
    sockets_filtered: bool = False  # the seccomp filter is in force
    filter_reason: str = ""  # why it is not

    def describe(self) -> str:
        return f"{self._landlock_text()}; {self._filter_text()}"

    def _landlock_text(self) -> str:
        if not self.applied:
            return f"not sandboxed: {self.reason}"
        network = "no TCP" if self.network_blocked else "TCP not restricted (Landlock ABI < 4)"
        scope = "scoped (signals, abstract sockets)" if self.scoped else "not scoped (Landlock ABI < 6)"
        return f"Landlock ABI {self.abi}: files confined, no exec, {network}, {scope}"

    def _filter_text(self) -> str:
        if self.sockets_filtered:
            return "seccomp: no new sockets but Unix socket pairs, no io_uring"
        return f"no seccomp filter: {self.filter_reason}"


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _last_error() -> str:
    return os.strerror(ctypes.get_errno())


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is unavailable."""
    result = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(int(result), 0)


def confine(*, read: Iterable[str], write: Iterable[str]) -> SandboxStatus:
    """Allow reading under `read`, reading and writing under `write`, nothing else, for good; then
    refuse new sockets other than Unix socket pairs. Each part applies where the kernel has it."""
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # both Landlock and seccomp require it
        return SandboxStatus(False, 0, False, f"prctl(NO_NEW_PRIVS): {_last_error()}", filter_reason="not tried")
    status = _restrict_with_landlock(read, write)
    # Last, so that the filter can never stand in the way of the Landlock calls, and a kernel without
    # seccomp still gets Landlock.
    filter_error = install_socket_filter()
    return replace(status, sockets_filtered=not filter_error, filter_reason=filter_error)


# --- Landlock ---


def _restrict_with_landlock(read: Iterable[str], write: Iterable[str]) -> SandboxStatus:
    abi = landlock_abi()
    if abi < 1:
        return SandboxStatus(False, 0, False, "the kernel has no Landlock support")
    libc = _libc()
    attr = _ruleset_attr(abi)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(_ruleset_attr_size(abi)), 0)
    if ruleset < 0:
        return SandboxStatus(False, abi, False, f"landlock_create_ruleset: {_last_error()}")
    try:
        handled_fs = attr.handled_access_fs
        write_rights = handled_fs & ~FS["EXECUTE"]
        for paths, rights in ((read, READ), (write, write_rights)):
            for path in paths:
                _allow(libc, ruleset, path, rights & handled_fs)
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            return SandboxStatus(False, abi, False, f"landlock_restrict_self: {_last_error()}")
    finally:
        os.close(ruleset)
    return SandboxStatus(True, abi, bool(attr.handled_access_net), scoped=bool(attr.scoped))


def _ruleset_attr(abi: int) -> _RulesetAttr:
    known_fs_rights = _FS_RIGHTS[: _FS_BY_ABI.get(abi, max(_FS_BY_ABI.values()))]
    handled_fs = sum(FS[name] for name in known_fs_rights)
    handled_net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    return _RulesetAttr(handled_fs, handled_net, scoped)


def _ruleset_attr_size(abi: int) -> int:
    """The fields this ABI knows: handled_access_fs, then handled_access_net (4), then scoped (6)."""
    fields = 3 if abi >= 6 else 2 if abi >= 4 else 1
    return fields * ctypes.sizeof(ctypes.c_uint64)


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    if not os.path.exists(path):
        return
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(path):
            rights &= _FILE_ONLY
        rule = _PathBeneathAttr(rights, fd)
        if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}): {_last_error()}")
    finally:
        os.close(fd)


# --- seccomp ---


@dataclass(frozen=True)
class Arch:
    """A syscall table: the numbers the filter needs."""

    audit: int  # AUDIT_ARCH_* from include/uapi/linux/audit.h
    seccomp: int
    socket: int
    socketpair: int
    io_uring_setup: int
    has_x32: bool = False


ARCHES = {
    "x86_64": Arch(audit=0xC000003E, seccomp=317, socket=41, socketpair=53, io_uring_setup=425, has_x32=True),
    "aarch64": Arch(audit=0xC00000B7, seccomp=277, socket=198, socketpair=199, io_uring_setup=425),
}
_X32_SYSCALL_BIT = 0x40000000

_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LOAD_WORD, _JUMP_IF_EQUAL, _JUMP_IF_AT_LEAST, _RETURN = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, ...
# Offsets in struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian:
# the low half of args[0] comes first, and socket families are ints).
_NR, _ARCH, _FIRST_ARG = 0, 4, 16


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def current_arch() -> Arch | None:
    """The syscall table of this process, or None where the filter does not know it (a 32-bit Python
    on a 64-bit kernel included)."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    return ARCHES.get(platform.machine())


def install_socket_filter() -> str:
    """Install the socket filter on every thread of the process; "" when done, else why not."""
    arch = current_arch()
    if arch is None:
        return f"unknown architecture {platform.machine()} ({8 * ctypes.sizeof(ctypes.c_void_p)}-bit)"
    instructions = socket_filter(arch)
    program = (_SockFilter * len(instructions))(*instructions)
    fprog = _SockFprog(len(instructions), program)
    result = _libc().syscall(arch.seccomp, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(fprog))
    if result == 0:
        return ""
    if result > 0:  # TSYNC names the thread it could not synchronise
        return f"thread {result} could not take the filter"
    return f"the kernel refused it ({_last_error()})"


def socket_filter(arch: Arch) -> list[_SockFilter]:
    """Allow every syscall but these: socket() (EACCES), socketpair() for any family but AF_UNIX (EACCES),
    io_uring_setup() (ENOSYS), and any syscall of another ABI, such as x32 or i386 on x86_64 (ENOSYS)."""
    program: list[_Step | str] = [
        _Step(_LOAD_WORD, _ARCH),
        _Step(_JUMP_IF_EQUAL, arch.audit, otherwise="not supported"),
        _Step(_LOAD_WORD, _NR),
    ]
    if arch.has_x32:  # x32 syscalls share the arch value and set this bit in the number
        program.append(_Step(_JUMP_IF_AT_LEAST, _X32_SYSCALL_BIT, then="not supported"))
    program += [
        _Step(_JUMP_IF_EQUAL, arch.socket, then="refused"),
        _Step(_JUMP_IF_EQUAL, arch.socketpair, then="socket pair"),
        _Step(_JUMP_IF_EQUAL, arch.io_uring_setup, then="not supported"),
        _Step(_RETURN, _RET_ALLOW),
        "socket pair",
        _Step(_LOAD_WORD, _FIRST_ARG),
        _Step(_JUMP_IF_EQUAL, socket.AF_UNIX, otherwise="refused"),
        _Step(_RETURN, _RET_ALLOW),
        "refused",
        _Step(_RETURN, _RET_ERRNO | errno.EACCES),
        "not supported",
        _Step(_RETURN, _RET_ERRNO | errno.ENOSYS),
    ]
    return _assemble(program)


class _Step(NamedTuple):
    """One BPF instruction whose jumps name a label (None: the next instruction)."""

    code: int
    k: int
    then: str | None = None
    otherwise: str | None = None


def _assemble(program: list[_Step | str]) -> list[_SockFilter]:
    """Labels (the strings) mark positions; BPF jumps are counted forward from the next instruction."""
    labels: dict[str, int] = {}
    steps: list[_Step] = []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(steps)
        else:
            steps.append(item)

    def offset(label: str | None, at: int) -> int:
        return 0 if label is None else labels[label] - at - 1

    return [_SockFilter(s.code, offset(s.then, at), offset(s.otherwise, at), s.k) for at, s in enumerate(steps)]
