FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Node.js and git: stdio MCP servers are spawned by the web process and the worker, and many
# are published on npm (`npx -y @modelcontextprotocol/server-...`) or drive git.
RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm git \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml ./
RUN pip install --no-cache-dir -e . 2>/dev/null || true
COPY . .
RUN pip install --no-cache-dir -e .
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "inspector.asgi:application"]
