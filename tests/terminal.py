"""A command run with stderr on a pseudo-terminal (where progress bars are drawn) and stdout on a pipe."""

from __future__ import annotations

import os
import pty
import subprocess


def run_with_stderr_on_a_terminal(command: list[str], timeout: float = 300) -> tuple[int, bytes, bytes]:
    """The command's exit code, its stdout, and what it drew on the terminal."""
    terminal, stderr = pty.openpty()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env={**os.environ, "COLUMNS": "120"})
    os.close(stderr)
    stdout = process.stdout.read() if process.stdout else b""
    drawn = b""
    while True:
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # the process closed its end
            break
        if not chunk:
            break
        drawn += chunk
    os.close(terminal)
    return process.wait(timeout=timeout), stdout, drawn
