FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY agent agent
COPY bots bots
COPY web web
COPY evals evals
COPY prompts prompts
RUN pip install --no-cache-dir .
ENV AGENT_PROMPTS_DIR=/app/prompts
EXPOSE 8000
CMD ["agent", "web", "--host", "0.0.0.0"]
