"""Text from the model, from data anyone may have written, or from a chat user, made safe to print."""

from __future__ import annotations

# What the commands print may be untrusted (the model's text, SQL, cells a stranger may have written):
# control characters would reach the terminal as escape sequences (ESC [2J clears it, ESC ] 8 writes a
# link, ESC ] 0 retitles the window) and bidirectional overrides reorder what a person reads. They are
# shown as \xNN or \uNNNN instead; newlines and tabs stay.
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))} | {
    code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
}


def safe(text: str) -> str:
    """`text` with every control character and bidirectional override made visible (see _CONTROLS)."""
    return text.translate(_CONTROLS)
