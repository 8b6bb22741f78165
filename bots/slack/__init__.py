"""The Slack adapter: receives mentions, DMs and thread replies, answers them in their thread through
the RunRegistry, with progress, a streamed answer and buttons. See docs/slack.md."""

from bots.slack.app import SlackBot

__all__ = ["SlackBot"]
