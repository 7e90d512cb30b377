FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 VAR_DIR=/var/lib/inspector
# Node.js and git: stdio MCP servers are spawned by the web process and the worker, and many
# are published on npm (`npx -y @modelcontextprotocol/server-...`) or drive git.
RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm git \
    && rm -rf /var/lib/apt/lists/*
# Everything runs as an unprivileged user that owns only var/ (a volume) and its home (npm's
# cache): neither the app's code nor the system can be changed by a server it spawns.
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/inspector \
        --shell /usr/sbin/nologin inspector \
    && mkdir -p /var/lib/inspector && chown inspector:inspector /var/lib/inspector
WORKDIR /app
COPY pyproject.toml ./
RUN pip install --no-cache-dir -e . 2>/dev/null || true
# .dockerignore keeps var/ (keys, passwords, the SQLite record), .venv, .git and caches out.
COPY . .
RUN pip install --no-cache-dir -e .
USER inspector
EXPOSE 8000
# /healthz answers before the host and HTTPS checks, so this works whatever ALLOWED_HOSTS says.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["daphne", "-v", "0", "-b", "0.0.0.0", "-p", "8000", "inspector.asgi:application"]
