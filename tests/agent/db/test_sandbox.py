"""The engine's sandbox (agent/db/sandbox.py): a small confined child process tries what escaped code
would try, and the real engine runs with the filter on every thread."""

from __future__ import annotations

import errno
import functools
import json
import os
import platform
import socket
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agent
from agent.db import Database, sandbox
from agent.db.sandbox import SandboxStatus

ABI = sandbox.landlock_abi()
HAS_SECCOMP = "\nSeccomp:" in Path("/proc/self/status").read_text()
ARCH = sandbox.current_arch()

needs_landlock = pytest.mark.skipif(ABI < 1, reason="the kernel has no Landlock")
needs_tcp_rules = pytest.mark.skipif(ABI < 4, reason="Landlock ABI < 4 has no TCP rules")
needs_scopes = pytest.mark.skipif(ABI < 6, reason="Landlock ABI < 6 has no signal or abstract-socket scopes")
needs_filter = pytest.mark.skipif(
    not HAS_SECCOMP or ARCH is None, reason="no seccomp in this kernel, or an architecture the filter does not know"
)

# Runs confined; everything it needs is imported first. Each probe answers "ok" or the errno's name.
PROBES = r"""
import ctypes, errno, json, os, signal, socket, sys
from agent.db import sandbox

config = json.loads(sys.argv[1])
early_unix = socket.socket(socket.AF_UNIX)  # made before confining, as the engine's own socket pair is
early_tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
status = sandbox.confine(read=config["read"], write=config["write"])
libc = ctypes.CDLL(None, use_errno=True)


def attempt(action):
    try:
        action()
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return "ok"


def check(result):
    if result < 0:
        raise OSError(ctypes.get_errno(), "syscall")


def round_trip():
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"ping")
        assert right.recv(4) == b"ping"


def io_uring_setup():
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    fd = libc.syscall(425, 4, params)  # the same number on x86_64 and aarch64
    check(fd)
    os.close(fd)


results = {
    "status": status.__dict__,
    "describe": status.describe(),
    "udp": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()),
    "tcp": attempt(lambda: socket.create_connection(("127.0.0.1", config["tcp_port"]), timeout=5).close()),
    "tcp_early_socket": attempt(lambda: early_tcp.connect(("127.0.0.1", config["tcp_port"]))),
    "inet6": attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()),
    "netlink": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close()),
    "inet_pair": attempt(lambda: socket.socketpair(socket.AF_INET)),
    "unix_pair": attempt(round_trip),
    "new_unix_socket": attempt(lambda: socket.socket(socket.AF_UNIX).close()),
    "abstract_socket": attempt(lambda: early_unix.connect(config["abstract"])),
    "signal_outside": attempt(lambda: os.kill(config["victim"], signal.SIGTERM)),
    "signal_parent": attempt(lambda: os.kill(os.getppid(), 0)),
    "signal_self": attempt(lambda: os.kill(os.getpid(), 0)),
    "io_uring": attempt(io_uring_setup),
    "seccomp_mode": libc.prctl(21, 0, 0, 0, 0),  # PR_GET_SECCOMP: 2 is "filter"
}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """What a confined child could and could not do, against a TCP listener, an abstract Unix socket
    and a process outside its sandbox (the victim must survive)."""
    scratch = tmp_path_factory.mktemp("confined")
    abstract = f"\0agent-sandbox-test-{uuid.uuid4().hex}"
    with (
        socket.create_server(("127.0.0.1", 0)) as tcp,
        socket.socket(socket.AF_UNIX) as abstract_listener,
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) as victim,
    ):
        abstract_listener.bind(abstract)
        abstract_listener.listen()
        config = {
            "read": _python_and_agent_paths(),
            "write": [str(scratch)],
            "tcp_port": tcp.getsockname()[1],
            "abstract": abstract,
            "victim": victim.pid,
        }
        results = _run_confined(config)
        results["victim_alive"] = victim.poll() is None
        victim.kill()
        yield results


def _python_and_agent_paths() -> list[str]:
    paths = sysconfig.get_paths()
    python = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    return sorted(python | {str(Path(agent.__file__).parent)})


def _run_confined(config: dict[str, Any], code: str = PROBES) -> dict[str, Any]:
    env = {"PYTHONPATH": str(Path(agent.__file__).parents[1]), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(config)], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@needs_filter
def test_udp_sockets_cannot_be_made(probes: dict[str, Any]) -> None:
    """Landlock has no UDP rules: the seccomp filter refuses the socket itself (DNS, exfiltration)."""
    assert probes["udp"] == "EACCES"


@needs_filter
def test_tcp_to_a_listening_loopback_port_fails(probes: dict[str, Any]) -> None:
    """The filter refuses a new TCP socket before it can connect (Landlock would refuse the connect)."""
    assert probes["tcp"] == "EACCES"


@needs_tcp_rules
def test_landlock_alone_stops_tcp_connect(probes: dict[str, Any]) -> None:
    """A TCP socket made before confining (the filter cannot see it) still cannot connect: Landlock."""
    assert probes["tcp_early_socket"] == "EACCES"


@needs_filter
def test_ipv6_and_netlink_sockets_cannot_be_made(probes: dict[str, Any]) -> None:
    """Every family but AF_UNIX is refused, with EACCES and not a kill, so the engine sees an error."""
    assert probes["inet6"] == "EACCES"
    assert probes["netlink"] == "EACCES"
    assert probes["inet_pair"] == "EACCES"


@needs_filter
def test_unix_socket_pairs_still_work(probes: dict[str, Any]) -> None:
    """The engine's own kind of socket: a connected AF_UNIX pair carries data."""
    assert probes["unix_pair"] == "ok"


@needs_filter
def test_no_new_unix_socket_can_reach_a_named_one(probes: dict[str, Any]) -> None:
    """Landlock (before ABI 9) does not check connect() to a named Unix socket such as Docker's or
    D-Bus's, so the filter refuses new Unix sockets; socket pairs are all the engine needs."""
    assert probes["new_unix_socket"] == "EACCES"


@needs_scopes
def test_an_abstract_socket_outside_the_sandbox_cannot_be_reached(probes: dict[str, Any]) -> None:
    """Landlock's abstract-socket scope: even a socket made before confining gets EPERM."""
    assert probes["abstract_socket"] == "EPERM"


@needs_scopes
def test_processes_outside_the_sandbox_cannot_be_signalled(probes: dict[str, Any]) -> None:
    """Landlock's signal scope: no signal (not even 0) to the parent or another process; the victim
    lives on. The sandbox may still signal itself (its own threads)."""
    assert probes["signal_outside"] == "EPERM"
    assert probes["victim_alive"]
    assert probes["signal_parent"] == "EPERM"
    assert probes["signal_self"] == "ok"


@needs_filter
def test_io_uring_cannot_be_set_up(probes: dict[str, Any]) -> None:
    """io_uring can make sockets without socket(): refused as if the kernel lacked it."""
    assert probes["io_uring"] == "ENOSYS"


@needs_landlock
def test_the_status_says_what_is_closed(probes: dict[str, Any]) -> None:
    """The one-line summary names every part in force on this kernel."""
    status = probes["status"]
    assert status["applied"] and status["abi"] == ABI
    text = probes["describe"]
    assert text.startswith(f"Landlock ABI {ABI}: files confined, no exec")
    if ABI >= 4:
        assert "no TCP" in text
    if ABI >= 6:
        assert status["scoped"] and "scoped (signals, abstract sockets)" in text
    if HAS_SECCOMP and ARCH is not None:
        assert status["sockets_filtered"] and probes["seccomp_mode"] == 2
        assert text.endswith("seccomp: no new sockets but Unix socket pairs, no io_uring")


def test_the_status_says_what_stays_open() -> None:
    """On an older kernel or without seccomp, the summary says what is missing and why."""
    text = SandboxStatus(True, 5, True, filter_reason="unknown architecture riscv64 (64-bit)").describe()
    assert text == (
        "Landlock ABI 5: files confined, no exec, no TCP, not scoped (Landlock ABI < 6); "
        "no seccomp filter: unknown architecture riscv64 (64-bit)"
    )
    nothing = SandboxStatus(False, 0, False, "the kernel has no Landlock support", sockets_filtered=True)
    assert nothing.describe().startswith("not sandboxed: the kernel has no Landlock support; seccomp: no new")


WITHOUT_FILTER = r"""
import json, sys
from agent.db import sandbox

sandbox.current_arch = lambda: None  # as on an architecture the filter does not know
config = json.loads(sys.argv[1])
status = sandbox.confine(read=config["read"], write=[])
try:
    open(config["secret"]).close()
    secret = "read"
except PermissionError:
    secret = "refused"
print(json.dumps({"describe": status.describe(), "secret": secret}))
"""


@needs_landlock
def test_without_the_filter_landlock_still_confines(tmp_path: Path) -> None:
    """Where the filter cannot go in (an unknown architecture, a kernel without seccomp), Landlock still
    applies, and the summary says the filter is missing and why."""
    secret = tmp_path / "secret"
    secret.write_text("x")
    config = {"read": _python_and_agent_paths(), "secret": str(secret)}
    results = _run_confined(config, WITHOUT_FILTER)
    assert results["secret"] == "refused"
    assert results["describe"].startswith(f"Landlock ABI {ABI}: files confined")
    assert results["describe"].endswith("; no seccomp filter: unknown architecture " + platform.machine() + " (64-bit)")


@pytest.mark.parametrize(("abi", "size"), [(1, 8), (3, 8), (4, 16), (5, 16), (6, 24), (7, 24)])
def test_the_ruleset_size_matches_what_each_abi_knows(abi: int, size: int) -> None:
    """An older kernel refuses a ruleset attr with non-zero fields it does not know (E2BIG)."""
    assert sandbox._ruleset_attr_size(abi) == size
    assert bool(sandbox._ruleset_attr(abi).scoped) == (abi >= 6)


# --- the filter program, run by a small BPF interpreter: covers the architecture this machine is not ---

AF_UNIX, AF_INET = 1, 2
ALLOW = 0x7FFF0000


def _run_filter(arch: sandbox.Arch, audit_arch: int, nr: int, first_arg: int = 0) -> int:
    data = nr.to_bytes(4, "little") + audit_arch.to_bytes(4, "little") + bytes(8) + first_arg.to_bytes(8, "little")
    program = sandbox.socket_filter(arch)
    accumulator, at = 0, 0
    while True:
        step = program[at]
        if step.code == 0x20:  # load a word of seccomp_data
            accumulator = int.from_bytes(data[step.k : step.k + 4], "little")
        elif step.code == 0x06:  # return
            return int(step.k)
        else:
            taken = accumulator == step.k if step.code == 0x15 else accumulator >= step.k
            at += step.jt if taken else step.jf
        at += 1


@pytest.mark.parametrize("name", ["x86_64", "aarch64"])
def test_the_filter_program_on_each_architecture(name: str) -> None:
    """The allow-list decides by syscall and family, and refuses any other ABI (x32, i386) outright."""
    arch = sandbox.ARCHES[name]
    denied = 0x00050000
    run = functools.partial(_run_filter, arch, arch.audit)
    assert run(arch.socket, AF_UNIX) == denied | errno.EACCES
    assert run(arch.socket, AF_INET) == denied | errno.EACCES
    assert run(arch.socketpair, AF_UNIX) == ALLOW
    assert run(arch.socketpair, AF_INET) == denied | errno.EACCES
    assert run(arch.socketpair, (1 << 32) | AF_UNIX) == ALLOW  # the kernel reads the family as an int
    assert run(arch.io_uring_setup) == denied | errno.ENOSYS
    assert run(63) == ALLOW  # any other syscall (read on aarch64, uname on x86_64)
    assert _run_filter(arch, 0x40000003, 359, AF_INET) == denied | errno.ENOSYS  # i386's socket()
    if arch.has_x32:
        assert run(0x40000000 | arch.socket, AF_INET) == denied | errno.ENOSYS


# --- the real engine ---


@needs_filter
async def test_every_engine_thread_runs_under_the_filter(db: Database) -> None:
    """The engine installs the filter with TSYNC before chdb starts its threads: every thread shows
    seccomp mode 2, and the engine still answers over its Unix socket pair."""
    await db.execute("SELECT count() FROM nycflights13.flights GROUP BY origin")  # start pipeline workers
    pid = db.backend._child.process.pid  # type: ignore[attr-defined]
    tasks = list(Path(f"/proc/{pid}/task").iterdir())
    assert len(tasks) > 5
    unfiltered = [t.name for t in tasks if "Seccomp:\t2" not in (t / "status").read_text()]
    assert unfiltered == []
    assert db.backend.sandbox_status.endswith("seccomp: no new sockets but Unix socket pairs, no io_uring")
