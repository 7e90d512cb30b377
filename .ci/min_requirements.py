"""The runtime dependencies of pyproject.toml pinned to their lower bounds (``>=X`` becomes ``==X``),
one a line, for ``make test-min-deps``. ``--constraints``: the same pins without extras (what pip
accepts as constraints); ``--tools NAME ...``: those dev extras' lines as they are written (the
test runner the pinned environment needs, installed under the constraints). A runtime dependency
without a lower bound is an error: its oldest allowed release would be untested."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
# name, optional [extras], then the specifiers (an environment marker is not supported here).
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)$")


def _name(requirement: str) -> str:
    match = REQUIREMENT.match(requirement)
    if match is None:
        raise ValueError(f"cannot read the requirement {requirement!r}")
    return match.group(1).lower().replace("_", "-")


def pinned(requirement: str, *, extras: bool = True) -> str:
    """``name[extras]==lower`` for a requirement whose specifiers include ``>=lower``."""
    match = REQUIREMENT.match(requirement)
    if match is None or ";" in requirement:
        raise ValueError(f"cannot read the requirement {requirement!r}")
    name, specifiers = match.group(1), match.group(3)
    wanted = (match.group(2) or "") if extras else ""
    lower = [spec.strip()[2:].strip() for spec in specifiers.split(",") if spec.strip().startswith(">=")]
    if len(lower) != 1:
        raise ValueError(f"{requirement!r} has no lower bound (>=): give it one")
    return f"{name}{wanted}=={lower[0]}"


def main(argv: list[str]) -> int:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    if argv[:1] == ["--tools"]:
        wanted = {name.lower().replace("_", "-") for name in argv[1:]}
        lines = [r for r in project["optional-dependencies"]["dev"] if _name(r) in wanted]
        if len(lines) != len(wanted):
            missing = wanted - {_name(r) for r in lines}
            print(f"not in the dev extras: {', '.join(sorted(missing))}", file=sys.stderr)
            return 1
    else:
        lines = [pinned(r, extras=argv[:1] != ["--constraints"]) for r in project["dependencies"]]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
