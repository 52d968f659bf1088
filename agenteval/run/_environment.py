"""The environment a run happened in: interpreter, platform, package versions and the agent's git
state. Never the value of an environment variable: secrets live there."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = (
    "agenteval",
    "agenteval-instrumentation",
    "agenteval-exporters",
    "opentelemetry-api",
    "opentelemetry-sdk",
    "duckdb",
    "pyarrow",
    "numpy",
    "openai",
    "anthropic",
)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_state(path: str | None) -> dict[str, Any] | None:
    """Commit and dirty flag of the repository holding ``path``, or None outside one."""
    if not path:
        return None
    folder = Path(path).resolve().parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    return {"commit": commit, "dirty": bool(git("status", "--porcelain"))}


def environment(agent_source: str | None = None) -> dict[str, Any]:
    """What to store with an experiment about where it ran."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "executable": sys.executable,
        "packages": {p: v for p in PACKAGES if (v := _version(p)) is not None},
        "git": git_state(agent_source),
    }
