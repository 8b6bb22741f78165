"""What every view of the web app reads: the agent, the stores and the settings, held on the app
(`request.app.state.web`), in the manner of datasette's views reading their datasette."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.templating import Jinja2Templates

from agent.app import AgentApp
from agent.config import Settings
from agent.runner import Interface
from chats.audiences import Audiences
from chats.conversations import ConversationStore
from chats.daily_budgets import DailyBudget
from chats.proposals import ProposalStore
from chats.rate_limits import RateLimit
from chats.runs import RunRegistry
from chats.sessions import SessionStore
from web.downloads import DownloadSlots

WEB: Interface = "web"  # the interface whose conversations and runs the web serves, and no other's


@dataclass(frozen=True)
class WebContext:
    agent: AgentApp
    store: ConversationStore
    proposals: ProposalStore  # what thumbs propose for the team's knowledge and evals
    runs: RunRegistry
    templates: Jinja2Templates
    token: str | None
    reattach_grace_s: float
    stream_grace_s: float  # on shutdown, how long a stream may go on until its run is done
    questions: RateLimit
    downloads: RateLimit  # a budget of its own: each runs a full query
    thumbs: RateLimit  # a budget of its own: each writes to the store and may propose knowledge
    downloading: DownloadSlots  # each client's downloads running now
    budget: DailyBudget  # what each client may spend per UTC day (off unless set)
    sessions: SessionStore  # who signed in (web/views/auth.py)
    audiences: Audiences  # who may open what belongs to someone (web/ownership.py)

    @property
    def settings(self) -> Settings:
        return self.agent.settings


def web_context(request: Request) -> WebContext:
    context: WebContext = request.app.state.web
    return context
