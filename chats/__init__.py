"""The kit every adapter shares, kept about people's chats: conversations and their claimed events
(`conversations.py`), runs in progress (`runs.py`) and their copies for other workers
(`shared_runs.py`), rate limits and per-conversation turn order (`pacing.py`), and the SQLite file that
holds them all (`state_file.py`). It imports the library (`agent`) only; adapters import it."""
