"""Real parts that live in environments of their own (their dependencies are many, pinned, or large), or that
come from Debian's packages, made the first time a test needs them, so the README's test command needs nothing
set up beforehand."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHOENIX = "arize-phoenix==20.26.1"
"""The Phoenix the backend test was last passed against: a new release may change its API or its parsing."""
CHDB = "chdb==4.4.0"
CHROMIUM = "/usr/bin/chromium"
"""Debian's chromium, which the dashboard's browser tests drive through Playwright (never Playwright's downloads)."""


def environment(name: str, *packages: str, override: str | None = None) -> str:
    """The Python of ``.venv-<name>`` at the checkout's root, made with ``packages`` from PyPI when missing;
    or the Python the environment variable ``override`` names."""
    given = os.environ.get(override) if override else None
    if given:
        assert Path(given).exists(), f"{override}={given}: no such Python"
        return given
    python = ROOT / f".venv-{name}" / "bin" / "python"
    pinned = python.parent.parent / "agenteval-packages.txt"
    with _alone(f"venv-{name}"):
        _make_environment(python, pinned, packages)
    return str(python)


def _make_environment(python: Path, pinned: Path, packages: tuple[str, ...]) -> None:
    if python.exists() and pinned.exists() and pinned.read_text() != "\n".join(packages):
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)  # a new pin
        pinned.write_text("\n".join(packages))
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(python.parent.parent)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
        pinned.write_text("\n".join(packages))


def chromium() -> str:
    """Debian's chromium, installed with apt-get the first time a test needs it (as root, as CI runs)."""
    with _alone("chromium"):
        _install_chromium()
    return CHROMIUM


def _install_chromium() -> None:
    if not os.path.exists(CHROMIUM):
        if os.geteuid() != 0:
            raise AssertionError(f"{CHROMIUM} is missing and only root can install it: apt-get install -y chromium")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env, stdout=subprocess.DEVNULL)


@contextlib.contextmanager
def _alone(part: str) -> Iterator[None]:
    """One test process at a time sets up ``part``: the suite's workers (pytest-xdist) may need it at once, and two
    pip installs into one venv, or two apt-gets, would break each other."""
    with open(ROOT / f".{part}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
