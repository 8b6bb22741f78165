"""Logging for every command: plain text for a person, or one JSON object a line (AGENT_LOG_FORMAT=json)
for a log pipeline.

Fields that belong to a run (its id and interface) are set once, in a context variable, by whoever
starts the run; every line logged while it runs carries them. Whatever a line says, the values of
the configured secrets never leave: they are replaced before the line is written; so is the query string
of the sign-in's requests in uvicorn's access lines (the provider's one-time code and state).
"""

from __future__ import annotations

import base64
import contextvars
import json
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from agent.config import Settings

REDACTED = "[redacted]"
# Attributes every LogRecord has; anything else on a record came from `extra=` and is a field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's copy of the message with terminal colours
}
_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "log_context", default=MappingProxyType({})
)


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Every line logged inside (in this task and the tasks it starts) carries `fields`."""
    token = _context.set({**_context.get(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def context_fields() -> dict[str, Any]:
    return dict(_context.get())


class Redactor:
    """Replaces each secret's value, as written and as JSON would escape it."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = set()
        for secret in secrets:
            if len(secret) >= 4:  # shorter values would blank out ordinary words
                forms.add(secret)
                forms.add(json.dumps(secret)[1:-1])
                forms.add(quote(secret, safe=""))  # as a URL carries it
        self._forms = sorted(forms, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the run's context, and the record's extras."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,  # which worker, with `agent serve --workers N`
        }
        line.update(getattr(record, "context", None) or {})
        line.update((key, value) for key, value in vars(record).items() if key not in _STANDARD and key != "context")
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return self._redact(json.dumps(line, ensure_ascii=False, default=str))


class TextFormatter(logging.Formatter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(super().format(record))


class _AddContext(logging.Filter):
    """Copies the run's context onto the record when it is made (the handler may format it later)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.context = _context.get()
        return True


class _SignInQueriesOut(logging.Filter):
    """uvicorn's access line writes the request's query string, and the sign-in callback's carries the
    provider's authorization code and state (`/auth/callback?code=...&state=...`): a credential anyone
    reading the logs could try to redeem. A line for a path under `/auth/` keeps its path alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        # uvicorn's access line: (client, method, path with query string, HTTP version, status)
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) >= 3:
            path, _, query = str(args[2]).partition("?")
            if query and "/auth/" in path:  # under any root path too
                record.args = (*args[:2], f"{path}?{REDACTED}", *args[3:])
        return True


def secrets_of(settings: Settings) -> list[str]:
    values = [
        secret.get_secret_value()
        for secret in (
            settings.anthropic_api_key,
            settings.openai_api_key,
            settings.slack_bot_token,
            settings.slack_signing_secret,
            settings.slack_app_token,
            settings.agent_web_token,
            settings.agent_oidc_client_secret,
            settings.agent_session_secret,
        )
        if secret is not None
    ]
    password = settings.clickhouse_password()
    if password:
        user = unquote(urlsplit(settings.clickhouse_url).username or "")
        basic = base64.b64encode(f"{user}:{unquote(password)}".encode()).decode()  # an Authorization header
        values += [password, unquote(password), basic]
    return values


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when a line is logged (a test may have swapped it)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_logging(settings: Settings, *, level: str | None = None) -> None:
    """Send every logger (uvicorn's, Bolt's, ours) through one handler on stderr, in the chosen format.
    Called again (another command in the same process), it replaces its own handler, no other."""
    redact = Redactor(secrets_of(settings))
    handler = _Stderr()
    handler.addFilter(_AddContext())
    handler.addFilter(_SignInQueriesOut())
    handler.setFormatter(JsonFormatter(redact) if settings.agent_log_format == "json" else TextFormatter(redact))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Stderr)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level or settings.log_level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    for noisy in ("httpx", "httpx2", "httpcore"):  # each model call would log a line with its URL at INFO
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def announce(settings: Settings, text: str, *, warning: bool = False) -> None:
    """A line for the person who started a server (where it listens, what is missing): printed as it is,
    or, with AGENT_LOG_FORMAT=json, logged like every other line, so each line of the output is JSON."""
    if settings.agent_log_format == "json":
        logging.getLogger("process.service").log(logging.WARNING if warning else logging.INFO, text)
        return
    print(f"warning: {text}" if warning else text, flush=True)
