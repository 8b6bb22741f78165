"""The v3 pipeline: the model drives a think/execute_sql loop; orchestration is a short loop."""

from agent.pipeline.v3.loop import LoopSettings, Pipeline

__all__ = ["LoopSettings", "Pipeline"]
