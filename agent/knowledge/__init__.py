"""What a team knows about its data (glossary, metrics, notes, verified queries), as YAML files in git:
read with their lines (`files`), put in the prompt within a budget and retrieved past it (`base`),
and checked through the model's own SQL path (`check`)."""

from agent.knowledge.base import KnowledgeBase, render
from agent.knowledge.check import Problem, check_entries
from agent.knowledge.files import Entry, KnowledgeError, load_directory

__all__ = ["Entry", "KnowledgeBase", "KnowledgeError", "Problem", "check_entries", "load_directory", "render"]
