"""`agent web`: serve the chat with uvicorn."""

from __future__ import annotations

import uvicorn

from agent.app import AgentApp
from agent.config import Settings
from web.app import create_app
from web.store import ConversationStore


def serve(settings: Settings, *, host: str, port: int) -> None:
    if settings.anthropic_api_key is None:
        print(
            "warning: ANTHROPIC_API_KEY is not set; the page will load, but questions will fail until it is.",
            flush=True,
        )
    agent = AgentApp.start(settings)
    store = ConversationStore(settings.agent_data_dir / "conversations.sqlite3")
    app = create_app(agent, store, owns_agent=True)
    print(f"Serving the chat on http://{host}:{port}  (Ctrl-C to stop)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=settings.log_level.lower(), workers=1)
