"""The deployment files users rely on stay valid, hardened, and free of secrets."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
import yaml

from tests.support import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVICES = {"web", "worker", "beat", "postgres", "redis"}
APP_SERVICES = {"web", "worker", "beat"}
# Every security setting the app reads must be settable through the compose environment.
SECURITY_SETTINGS = {
    "DEBUG",
    "SECRET_KEY",
    "SECRET_KEY_FILE",
    "INTEGRITY_KEY",
    "INTEGRITY_KEY_FILE",
    "ALLOWED_HOSTS",
    "CSRF_TRUSTED_ORIGINS",
    "SECURE_COOKIES",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "SECURE_PROXY_SSL_HEADER",
    "CLIENT_IP_HEADER",
    "API_TOKEN_TTL_DAYS",
    "LOGIN_THROTTLE_FAILURES",
    "LOGIN_THROTTLE_ADDRESS_FAILURES",
    "LOGIN_THROTTLE_WINDOW_SECONDS",
}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|_KEY(_FILE)?$", re.IGNORECASE)
# ${NAME}, ${NAME:-} or ${NAME:?message}: a value that comes from outside, with no default.
FROM_OUTSIDE = re.compile(r"^\$\{[A-Z_]+(:-|:\?[^}]*)?\}$")


@pytest.fixture(scope="module", autouse=True)
def _empty_env_file(tmp_path_factory: pytest.TempPathFactory) -> None:
    """An empty env file for every compose call: a developer's .env beside the compose file must
    not change the result."""
    global EMPTY_ENV_FILE
    EMPTY_ENV_FILE = tmp_path_factory.mktemp("compose") / "empty.env"
    EMPTY_ENV_FILE.write_text("")


EMPTY_ENV_FILE = Path()


def _compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.fail(
            "docker-compose is not installed (apt-get install docker-compose; `make test` does it as root)"
        )
    clean = {key: value for key, value in os.environ.items() if key not in SECURITY_SETTINGS}
    return subprocess.run(
        [compose, "--env-file", str(EMPTY_ENV_FILE), "-f", "docker-compose.yml", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**clean, "POSTGRES_PASSWORD": "from-the-environment", **(env or {})},
    )


def _resolved(env: dict[str, str] | None = None) -> dict[str, Any]:
    result = _compose("config", env=env)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = yaml.safe_load(result.stdout)
    return document


def _raw() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    return document


# --- docker-compose.yml -----------------------------------------------------------------------


def test_docker_compose_file_is_valid() -> None:
    result = _compose("config", "-q")

    assert result.returncode == 0, result.stderr


def test_docker_compose_describes_web_worker_beat_postgres_and_redis() -> None:
    result = _compose("config", "--services")

    assert set(result.stdout.split()) == SERVICES


def test_every_service_restarts_by_itself() -> None:
    services = _resolved()["services"]

    assert {name: services[name].get("restart") for name in SERVICES} == dict.fromkeys(
        SERVICES, "unless-stopped"
    )


def test_web_worker_postgres_and_redis_have_real_healthchecks() -> None:
    services = _resolved()["services"]

    tests = {
        name: " ".join(services[name]["healthcheck"]["test"])
        for name in ("web", "worker", "postgres", "redis")
    }
    assert "/healthz" in tests["web"]
    # The worker pings its own node (the container's hostname) through the broker; `config`
    # prints the `$` escaped, the container's shell sees $HOSTNAME.
    assert "inspect ping" in tests["worker"] and "celery@$$HOSTNAME" in tests["worker"]
    assert "pg_isready" in tests["postgres"]
    assert "redis-cli ping" in tests["redis"]
    for name in APP_SERVICES:
        assert services[name]["depends_on"] == {
            "postgres": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
        }


@pytest.mark.celery
def test_the_worker_healthcheck_passes_while_the_worker_serves_and_fails_once_it_is_gone(
    redis_url: str, tmp_path: Path
) -> None:
    command = _resolved()["services"]["worker"]["healthcheck"]["test"][1].replace("$$", "$")
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "VAR_DIR": str(tmp_path),
        "HOSTNAME": socket.gethostname(),  # Docker sets it to the container's hostname
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # `celery`, as in the image
    }
    redis.Redis.from_url(redis_url).flushdb()
    # The compose service's own command: the default node name, celery@<hostname>.
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "inspector",
            "worker",
            "-P",
            "threads",
            "-c",
            "2",
            "-l",
            "warning",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while (
            healthy := subprocess.run(["sh", "-c", command], cwd=REPO_ROOT, env=env, capture_output=True)
        ).returncode:
            assert worker.poll() is None and time.monotonic() < deadline, healthy.stderr
    finally:
        worker.terminate()
        worker.wait(timeout=30)

    assert healthy.returncode == 0
    assert subprocess.run(["sh", "-c", command], cwd=REPO_ROOT, env=env, capture_output=True).returncode != 0


def test_every_security_setting_passes_through_the_compose_environment() -> None:
    production = {
        "DEBUG": "0",
        "ALLOWED_HOSTS": "inspector.example.com",
        "CSRF_TRUSTED_ORIGINS": "https://inspector.example.com",
        "SECURE_COOKIES": "1",
        "SECURE_SSL_REDIRECT": "1",
        "SECURE_HSTS_SECONDS": "31536000",
        "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
        "SECRET_KEY_FILE": "/run/secrets/secret_key",
        "INTEGRITY_KEY_FILE": "/run/secrets/integrity_key",
        "API_TOKEN_TTL_DAYS": "30",
    }

    services = _resolved(production)["services"]

    for name in APP_SERVICES:
        environment = services[name]["environment"]
        assert SECURITY_SETTINGS <= set(environment), name
        assert {key: environment[key] for key in production} == production


def test_the_compose_file_holds_no_secret_value() -> None:
    document = _raw()
    environments = [document["x-env"]] + [
        service["environment"]
        for service in document["services"].values()
        if isinstance(service.get("environment"), dict)
    ]

    for environment in environments:
        for name, value in environment.items():
            if SECRET_NAME.search(name):
                assert FROM_OUTSIDE.match(str(value)), f"{name} has a literal value"
            if name.endswith("_URL"):
                password = re.match(r"^\w+://[^:@/]+:([^@]*)@", str(value))
                assert password is None or FROM_OUTSIDE.match(password.group(1)), f"{name} holds a password"


def test_without_a_database_password_compose_refuses_to_start() -> None:
    result = _compose("config", "-q", env={"POSTGRES_PASSWORD": ""})

    assert result.returncode != 0
    assert "POSTGRES_PASSWORD" in result.stderr


# --- the image --------------------------------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions (continuation lines joined), as (INSTRUCTION, arguments)."""
    text = (REPO_ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_image_runs_as_an_unprivileged_user() -> None:
    instructions = _dockerfile()
    users = [arguments for instruction, arguments in instructions if instruction == "USER"]
    last_user = max(index for index, (instruction, _) in enumerate(instructions) if instruction == "USER")
    last_run = max(index for index, (instruction, _) in enumerate(instructions) if instruction == "RUN")

    assert users and users[-1] not in {"root", "0", "0:0"}
    assert last_user > last_run  # nothing after it runs as root
    assert any("useradd" in arguments and users[-1] in arguments for _, arguments in instructions)


def test_the_image_checks_its_own_health() -> None:
    healthchecks = [arguments for instruction, arguments in _dockerfile() if instruction == "HEALTHCHECK"]

    assert len(healthchecks) == 1 and "/healthz" in healthchecks[0]


@pytest.mark.parametrize(
    "path",
    [
        "var/secret_key",
        "var/admin-password",
        "var/inspector.sqlite3",
        "var/h1-pg/mcp-stderr/demo.log",
        ".venv/bin/python",
        ".git/config",
        ".env",
        "node_modules/x/index.js",
        "tests/mcp_servers/node_modules/@modelcontextprotocol/server-everything/package.json",
        "bench/results/latest.json",
        "conversations/__pycache__/models.cpython-311.pyc",
    ],
)
def test_dockerignore_keeps_local_state_and_secrets_out_of_the_image(path: str) -> None:
    assert _docker_ignores(path), path


@pytest.mark.parametrize(
    "path", ["manage.py", "inspector/settings.py", "templates/base.html", "static/js/conversation_detail.js"]
)
def test_dockerignore_keeps_the_app_itself(path: str) -> None:
    assert not _docker_ignores(path)


def _docker_ignores(path: str) -> bool:
    """Docker's rule: a path is excluded when it or one of its parent directories matches a pattern
    (``*`` within a segment, ``**`` across segments); a later ``!pattern`` re-includes."""
    patterns = [
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = path.split("/")
    prefixes = ["/".join(parts[: index + 1]) for index in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = _pattern_regex(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            excluded = not negated
    return excluded


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out += "(?:.*/)?"
            index += 3
        elif pattern.startswith("**", index):
            out += ".*"
            index += 2
        elif pattern[index] == "*":
            out += "[^/]*"
            index += 1
        elif pattern[index] == "?":
            out += "[^/]"
            index += 1
        else:
            out += re.escape(pattern[index])
            index += 1
    return re.compile(out)


# --- Django's deployment checklist ------------------------------------------------------------


def _documented_production_env() -> dict[str, str]:
    """The production settings the README documents (its ``production settings`` block), with each
    ``<placeholder>`` replaced by a fresh random value."""
    readme = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"<!-- production settings -->\s*```\w*\n(.*?)```", readme, re.DOTALL)
    assert block is not None, "the README's production settings block is missing"
    env = {}
    for line in block.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, value = line.split("=", 1)
            env[name] = secrets.token_urlsafe(48) if value.startswith("<") else value
    return env


def test_the_documented_production_settings_pass_the_deployment_checklist(tmp_path: Path) -> None:
    production = _documented_production_env()
    env = {key: value for key, value in os.environ.items() if key not in SECURITY_SETTINGS}
    env.update(production, VAR_DIR=str(tmp_path))
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)

    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "DEBUG"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
    assert {"SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_COOKIES", "CSRF_TRUSTED_ORIGINS"} <= set(
        production
    )


def test_the_defaults_are_not_mistaken_for_production(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key not in SECURITY_SETTINGS}
    env["VAR_DIR"] = str(tmp_path)

    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )

    # `make run` serves plain HTTP on 127.0.0.1: the checklist names what production must set.
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout


def test_the_web_healthchecks_pass_against_a_served_app_with_production_host_and_https_rules(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(VAR_DIR=str(tmp_path), ALLOWED_HOSTS="inspector.example.com", SECURE_SSL_REDIRECT="1")
    compose_check = _resolved()["services"]["web"]["healthcheck"]["test"][1:]
    image_check = json.loads(
        next(arguments for instruction, arguments in _dockerfile() if instruction == "HEALTHCHECK").split(
            "CMD", 1
        )[1]
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "inspector.asgi:application"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "daphne did not start"
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.wait(timeout=0.1)  # a bounded wait for it to listen (or to die)
        results = {
            name: subprocess.run(
                [part.replace(":8000/", f":{port}/") for part in command],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
            )
            for name, command in (("compose", compose_check), ("image", image_check))
        }
        other_page = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/')",
            ],
            capture_output=True,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)

    assert {name: result.returncode for name, result in results.items()} == {"compose": 0, "image": 0}
    assert other_page.returncode != 0  # any other page: 400, the host is not allowed


# --- the compose environment, exactly as resolved, runs the app ------------------------------


def _minimal_compose_environments() -> dict[str, dict[str, str]]:
    """Each app service's environment as `docker-compose config` resolves it from the documented
    minimal `.env`: POSTGRES_PASSWORD and nothing else (every ``${X:-}`` default applies)."""
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.fail("docker-compose is not installed (apt-get install docker-compose; `make test` does it)")
    result = subprocess.run(
        [compose, "--env-file", str(EMPTY_ENV_FILE), "-f", "docker-compose.yml", "config"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "POSTGRES_PASSWORD": "only-this-is-set"},
    )
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    return {
        name: {key: str(value) for key, value in services[name]["environment"].items()}
        for name in APP_SERVICES
    }


@pytest.fixture
def compose_database() -> Iterator[str]:
    """A database of its own on the test PostgreSQL server, for `migrate` as the web service runs it."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"] != "inspector.postgresql":
        pytest.fail("the compose environment needs PostgreSQL (run with DATABASE_URL, as `make test` does)")
    name = f"compose_{db['NAME']}"[:60]
    server = {
        "host": db.get("HOST") or "127.0.0.1",
        "port": db.get("PORT") or 5432,
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "dbname": "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**server) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    user = server["user"] or ""
    password = f":{server['password']}" if server["password"] else ""
    try:
        yield f"postgres://{user}{password}@{server['host']}:{server['port']}/{name}"
    finally:
        with psycopg.connect(**server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _on_this_machine(
    environment: dict[str, str], *, database_url: str, redis_url: str, var_dir: Path
) -> dict[str, str]:
    """The resolved environment with the compose host names (postgres, redis) and the volume
    replaced by this machine's test services and a temporary directory; every other value as is."""
    assert environment["DATABASE_URL"].startswith("postgres://inspector:only-this-is-set@postgres:5432/")
    assert environment["REDIS_URL"].startswith("redis://redis:6379/")
    return {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        **environment,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "VAR_DIR": str(var_dir),
    }


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.postgres
@pytest.mark.celery
def test_every_app_service_starts_with_the_compose_environment_resolved_from_the_minimal_env_file(
    compose_database: str, redis_url: str, tmp_path: Path
) -> None:
    environments = _minimal_compose_environments()
    # The defaults compose passes when a variable is unset are empty strings, not absent names.
    assert environments["web"]["INTEGRITY_KEY_FILE"] == "" and environments["web"]["SECRET_KEY_FILE"] == ""
    var_dir = tmp_path / "var"  # the shared volume
    envs = {
        name: _on_this_machine(
            environment, database_url=compose_database, redis_url=redis_url, var_dir=var_dir
        )
        for name, environment in environments.items()
    }

    migrate = _run([sys.executable, "manage.py", "migrate", "--noinput"], envs["web"])
    checks = {
        name: _run([sys.executable, "manage.py", "check", "--deploy"], env) for name, env in envs.items()
    }
    # What `celery -A inspector worker` and `beat` load before they serve: the app, its
    # configuration from the settings, and every task module (which sets Django up).
    load = (
        "from inspector.celery import app; app.loader.import_default_modules(); "
        "print(app.conf.broker_url, sorted(name for name in app.tasks if name.startswith('conversations.')))"
    )
    workers = {name: _run([sys.executable, "-c", load], envs[name]) for name in ("worker", "beat")}

    assert migrate.returncode == 0, migrate.stderr[-3000:]
    for name, result in checks.items():
        assert result.returncode == 0, f"{name}: {result.stderr[-3000:]}"
    for name, result in workers.items():
        assert result.returncode == 0, f"{name}: {result.stderr[-3000:]}"
        assert result.stdout.startswith(redis_url) and "conversations.tasks.run_turn" in result.stdout
    # One key of each kind, generated in the shared volume and readable by its owner only.
    for key in ("secret_key", "integrity_key"):
        assert (var_dir / key).is_file() and (var_dir / key).stat().st_mode & 0o777 == 0o600


# --- the health probe answers within the container probes' wait ----------------------------------

HEALTH_PROBE = (
    "import django; django.setup(); from django.test import Client; "
    "r = Client().get('/healthz'); print(r.status_code, r.content)"
)


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers: a hung or firewalled server."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        yield int(silent.getsockname()[1])


def test_the_health_probe_answers_503_within_its_own_short_wait_not_the_pools_when_the_database_hangs(
    tmp_path: Path,
) -> None:
    with _silent_server() as port:
        env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
        env.update(
            VAR_DIR=str(tmp_path),
            DJANGO_SETTINGS_MODULE="inspector.settings",
            DATABASE_URL=f"postgres://inspector@127.0.0.1:{port}/inspector",
            # Real requests may wait this long for a connection; the probe must not.
            DATABASE_POOL_TIMEOUT_SECONDS="3600",
        )
        # The bound: long enough for any start-up, far shorter than the pool's timeout.
        probe = subprocess.run(
            [sys.executable, "-c", HEALTH_PROBE],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert probe.stdout.strip() == "503 b'unavailable\\n'", probe.stderr


@pytest.mark.django_db
def test_the_health_probe_answers_503_when_the_deployment_has_redis_and_it_hangs() -> None:
    from django.test import Client, override_settings

    with _silent_server() as port, override_settings(REDIS_URL=f"redis://127.0.0.1:{port}/0"):
        response = Client().get("/healthz", HTTP_HOST="localhost")

    assert (response.status_code, response.content) == (503, b"unavailable\n")


# --- backups ----------------------------------------------------------------------------------


def test_the_documented_backup_commands_leave_copies_only_their_owner_can_read(tmp_path: Path) -> None:
    guide = (REPO_ROOT / "docs" / "deployment.md").read_text()
    section = guide.split("### Backups", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "docs/deployment.md §6 Backups shows no commands"
    # The SQLite installation's lines (pg_dump and manage.py need a server and the app).
    lines = [
        line.replace(".venv/bin/python", sys.executable)
        for line in block.group(1).splitlines()
        if line.strip()
        and not line.lstrip().startswith("#")
        and "pg_dump" not in line
        and "manage.py" not in line
    ]
    (tmp_path / "var").mkdir()
    with contextlib.closing(sqlite3.connect(tmp_path / "var" / "inspector.sqlite3")) as database:
        database.execute("CREATE TABLE django_session (k)")
        database.commit()
    for key in ("secret_key", "integrity_key"):
        (tmp_path / "var" / key).write_text("k" * 64)
        (tmp_path / "var" / key).chmod(0o600)

    # An ordinary login shell's umask, which would leave a new file 0644.
    result = subprocess.run(
        ["sh", "-c", "umask 022\n" + "\n".join(lines)], cwd=tmp_path, capture_output=True, text=True
    )

    assert result.returncode == 0, result.stderr
    copies = sorted((tmp_path / "backups").iterdir())
    assert [copy.name for copy in copies] == ["inspector.sqlite3", "integrity_key", "secret_key"]
    assert {copy.name: copy.stat().st_mode & 0o777 for copy in copies} == dict.fromkeys(
        ["inspector.sqlite3", "integrity_key", "secret_key"], 0o600
    )
    assert (tmp_path / "backups").stat().st_mode & 0o777 == 0o700
