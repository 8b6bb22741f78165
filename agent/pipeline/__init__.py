"""The pipeline behind the Runner (agent.runner): the model drives a think/execute_sql loop, and the
orchestration is a short loop (`loop.py`) that calls small named pieces: the request it sends
(`request.py`), the tools (`tools.py`, `charting.py`), guards, context trimming and run state."""

from agent.pipeline.loop import LoopSettings, Pipeline

__all__ = ["LoopSettings", "Pipeline"]
