"""What every measure is handed: the services, the run's mode and where to put artefacts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.environment import Services

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass
class Context:
    services: Services
    quick: bool = False
    repeat: int | None = None
    results_dir: Path = RESULTS_DIR
    profile: bool = True

    def repeats(self, full: int, quick: int) -> int:
        """How many times to repeat a measure: ``--repeat`` wins, else the mode's default."""
        if self.repeat is not None:
            return self.repeat
        return quick if self.quick else full

    def log(self, message: str) -> None:
        print(f"  {message}", flush=True)
