"""Services of its own for each pytest-xdist worker (``make test`` runs the suite in parallel
processes). Loaded with ``-p tests.workers`` so it runs before Django reads its settings.

Each worker ``gwN`` takes the Redis database ``N`` below ``REDIS_URL``'s (15, 14, ... for the
default index 15) and a ``VAR_DIR`` of its own below the one given; pytest-django already gives
each worker a test database of its own (``test_<name>_gwN``). Without xdist nothing changes.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# No warm start in the tests' processes (nor the servers and workers they start, which inherit
# it): a test that needs one turns it on for its own process.
os.environ.setdefault("WARM_START", "0")


def _redis_url_for(url: str, index: int) -> str:
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) - index
    if database < 0:
        raise RuntimeError(f"REDIS_URL's database index leaves no room for worker {index}: {url}")
    return urlunsplit(parts._replace(path=f"/{database}"))


if _WORKER.startswith("gw"):
    _index = int(_WORKER.removeprefix("gw"))
    if os.environ.get("REDIS_URL"):
        os.environ["REDIS_URL"] = _redis_url_for(os.environ["REDIS_URL"], _index)
    _base = Path(os.environ.get("VAR_DIR") or Path(__file__).resolve().parent.parent / "var")
    os.environ["VAR_DIR"] = str(_base / _WORKER)
