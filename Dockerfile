FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml ./
RUN pip install --no-cache-dir -e . 2>/dev/null || true
COPY . .
RUN pip install --no-cache-dir -e .
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "inspector.asgi:application"]
