"""The Slack app as docs/slack.md tells an admin to create it: the YAML manifest block is read out of the
doc, so the scopes the fake grants are the ones the doc asks for, and a scope missing from the doc fails
the tests as it would fail a real install."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "slack.md"
_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SCOPE_LINE = re.compile(r"^\s*-\s*([a-z_.]+:[a-z_.]+)\s*(?:#\s*(.*))?$")


@cache
def manifest_text() -> str:
    """The first YAML block of docs/slack.md: the app manifest."""
    found = _BLOCK.search(DOC.read_text(encoding="utf-8"))
    assert found is not None, f"no ```yaml manifest block in {DOC}"
    return found.group(1)


def manifest() -> dict[str, Any]:
    loaded = yaml.safe_load(manifest_text())
    assert isinstance(loaded, dict)
    return loaded


def bot_scopes() -> frozenset[str]:
    return frozenset(manifest()["oauth_config"]["scopes"]["bot"])


def experience() -> str:
    """The app's AI messaging experience: `agent_view`, or the legacy `assistant_view` (the feature the
    manifest sets; docs.slack.dev/ai/migrating-to-agent-messaging)."""
    features = manifest()["features"]
    return "agent_view" if "agent_view" in features else "assistant_view"


def bot_events() -> list[str]:
    return list(manifest()["settings"]["event_subscriptions"]["bot_events"])


def scope_comments() -> dict[str, str]:
    """Each bot scope with the comment beside it in the manifest (YAML drops comments, so they are read
    from the text)."""
    text = manifest_text()
    start = text.index("    bot:\n")
    comments: dict[str, str] = {}
    for line in text[start:].splitlines()[1:]:
        found = _SCOPE_LINE.match(line)
        if found is None:
            break
        comments[found.group(1)] = (found.group(2) or "").strip()
    return comments
