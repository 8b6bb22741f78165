"""The kit every adapter shares, kept about people's chats: conversations and their claimed events
(`conversations.py`), runs in progress (`runs.py`) and their copies for other workers
(`shared_runs.py`), rate limits and per-conversation turn order (`pacing.py`), proposals from thumbs
(`proposals.py`), and `ChatState` (`state.py`), which opens the one state file, brings its tables
(`schema.py`) up to date and hands out every store. It imports the library (`agent`) only; adapters
import it."""
