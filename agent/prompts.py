"""Prompt files in `prompts/`, rendered with Jinja2 (StrictUndefined: a missing variable is an error)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, TemplateNotFound

from agent import safe_yaml

PLATFORMS = ("slack", "web", "cli")


class PromptError(Exception):
    """A prompt file is missing or does not render."""


class PromptLibrary:
    def __init__(self, directory: Path) -> None:
        if not directory.is_dir():
            raise PromptError(f"Prompt folder {directory} does not exist; set AGENT_PROMPTS_DIR.")
        self.directory = directory
        self._env = Environment(
            loader=FileSystemLoader(directory),
            undefined=StrictUndefined,
            keep_trailing_newline=False,
            autoescape=False,
        )

    def render(self, name: str, **variables: Any) -> str:
        try:
            return self._env.get_template(name).render(**variables).strip()
        except TemplateNotFound:
            raise PromptError(f"Prompt file {self.directory / name} is missing.") from None

    def tools(self, **variables: Any) -> list[dict[str, Any]]:
        loaded = safe_yaml.load(self.render("TOOLS.yaml", **variables))  # libyaml's parser (agent/safe_yaml.py)
        return [dict(tool) for tool in loaded]

    def format_guidance(self, platform: str) -> str:
        if platform not in PLATFORMS:
            raise PromptError(f"Unknown platform format {platform!r}; expected one of {', '.join(PLATFORMS)}.")
        return self.render(f"formats/{platform}.md")

    def names(self) -> list[str]:
        return sorted(str(p.relative_to(self.directory)) for p in self.directory.rglob("*") if p.is_file())


@cache
def prompt_library(directory: Path) -> PromptLibrary:
    return PromptLibrary(directory)
