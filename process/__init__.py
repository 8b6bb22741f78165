"""The processes a person runs, which compose the library and the adapters: the command line
(`cli.py`) and its terminal printer, the service that serves the web chat and the Slack bot in one
process (`service.py`), and the supervisor of several workers (`workers.py`). Only this package imports
`web` and `bots`; nothing else in `agent` imports it."""
