"""Outside review 2: `agent audit --json` prints what an asker typed, as `agent audit` does, to a terminal.
`json.dumps(..., ensure_ascii=False)` escapes only U+0000-U+001F: the C1 controls (U+009B is an 8-bit CSI,
U+009D an OSC) and the bidirectional overrides a question may carry reach the terminal raw, which the
readable listing (process/untrusted.py) exists to prevent. Asserts the SAFE behaviour."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from chats.audit import AuditEntry
from chats.state import ChatState, state_path
from process.cli import main

TRICKS = "\x9b2J \x9d8;;http://evil.example\x9c \u202egnp.exe"


def test_json_export_does_not_carry_terminal_controls_a_question_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENT_DATA_DIR", str(tmp_path))
    state = ChatState(state_path(tmp_path))
    try:
        ann = "person:email:ann@example.com"
        entry = AuditEntry("r1", time.time(), ann, "web", "", "jfk", "c1", TRICKS, "answered")
        asyncio.run(state.audit.record(entry))
    finally:
        state.close()
    assert main(["audit", "--json"]) == 0
    out = capsys.readouterr().out
    assert "r1" in out
    assert not any(ch in out for ch in "\x9b\x9d\x9c\u202e"), "a question's C1 controls and bidi override print raw"
