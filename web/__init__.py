"""The web chat (Starlette + SSE) over the Runner interface."""
