# The app: `agent serve` (the web chat, plus the Slack bot when SLACK_BOT_TOKEN is set). Slim, runs as an
# unprivileged user, and holds no secret: every setting comes from the environment at run time
# (docker-compose.yml passes the values in .env).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY agent agent
COPY bots bots
COPY web web
COPY evals evals
COPY prompts prompts
COPY knowledge knowledge
RUN pip install . \
 && useradd --system --user-group --uid 10001 --home-dir /data --no-create-home analyst \
 && mkdir /data && chown analyst:analyst /data
ENV AGENT_PROMPTS_DIR=/app/prompts AGENT_DATA_DIR=/data
USER analyst
EXPOSE 8000
# /readyz answers 200 when the API key is set, ClickHouse answers, the schema is read and the process is
# not shutting down (503 otherwise, saying which). It is asked for as 127.0.0.1, so keep that name in
# AGENT_WEB_ALLOWED_HOSTS. /healthz (alive) is for an orchestrator's liveness probe.
HEALTHCHECK --interval=30s --timeout=6s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=5)"]
CMD ["agent", "serve", "--host", "0.0.0.0", "--port", "8000"]
