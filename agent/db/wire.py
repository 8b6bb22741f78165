"""Frames between the app and its embedded-engine process: a JSON header and a raw byte payload.

JSON and bytes only (never pickle): the engine process runs SQL a model wrote, so the app must not
trust what comes back from it beyond "bytes of a result".
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

_PREFIX = struct.Struct(">II")  # header length, payload length
MAX_HEADER = 1 << 20
MAX_PAYLOAD = 1 << 30


class WireError(Exception):
    """The other side sent something that is not a frame, or went away."""


def encode(header: dict[str, Any], payload: bytes = b"") -> bytes:
    raw = json.dumps(header, separators=(",", ":")).encode()
    return _PREFIX.pack(len(raw), len(payload)) + raw + payload


def decode_prefix(prefix: bytes) -> tuple[int, int]:
    header_len, payload_len = _PREFIX.unpack(prefix)
    if header_len > MAX_HEADER or payload_len > MAX_PAYLOAD:
        raise WireError(f"frame too large ({header_len} + {payload_len} bytes)")
    return header_len, payload_len


def decode_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"bad frame header: {exc}") from None
    if not isinstance(header, dict):
        raise WireError("bad frame header: not an object")
    return header


PREFIX_SIZE = _PREFIX.size


def read_frame_blocking(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    header_len, payload_len = decode_prefix(_read_exact(sock, PREFIX_SIZE))
    header = decode_header(_read_exact(sock, header_len))
    return header, _read_exact(sock, payload_len)


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise WireError("connection closed")
        chunks += chunk
    return bytes(chunks)
