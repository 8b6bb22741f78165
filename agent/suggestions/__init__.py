"""Questions the agent suggests: follow-ups after an answer, and example questions for an empty chat.
Both come from the follow-up model, and both read its reply with one parser (`replies.py`)."""

from agent.suggestions.examples import ExampleQuestions
from agent.suggestions.followups import FollowupGenerator

__all__ = ["ExampleQuestions", "FollowupGenerator"]
