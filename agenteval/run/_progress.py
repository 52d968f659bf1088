"""What a person sees while a run goes: a bar on a terminal, plain lines otherwise, or nothing."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from ..render._text_safety import visible

PLAIN_EVERY_SECONDS = 5.0


class Progress:
    """Counts of done, passed, wrong, failed and infrastructure failures, and calls waiting on rate limits."""

    def __init__(self) -> None:
        self.total = 0
        self.done = 0
        self.outcomes = {"passed": 0, "wrong": 0, "failed": 0}
        self.infrastructure = 0
        self.rate_limited = 0
        self.gone = False
        """The output went away (a closed pipe, ``agenteval run 2>&1 | head``): the progress goes quiet."""

    def _shown(self, show: Callable[[], Any]) -> None:
        """``show()``; an output that cannot be written stops the progress, never the run (which would lose
        the trials finished but not saved yet, and leave the experiment saying running)."""
        if self.gone:
            return
        try:
            show()
        except (OSError, ValueError):  # a broken pipe; ValueError: the file was closed under the run
            self.gone = True

    @staticmethod
    def create(mode: str = "auto") -> Progress:
        """``auto``: a live bar on a terminal, lines when output is redirected; ``plain``; ``none``."""
        if mode == "none":
            return Progress()
        if mode == "plain" or not sys.stderr.isatty():
            return PlainProgress()
        return BarProgress()

    def start(self, total: int, experiment_id: str) -> None:
        self.total = total

    def advance(self, outcome: str, infrastructure: bool) -> None:
        self.done += 1
        self.outcomes[outcome] += 1
        self.infrastructure += infrastructure
        self.refresh()

    def waiting(self, change: int) -> None:
        """A call started (+1) or stopped (-1) waiting on a rate limit."""
        self.rate_limited += change
        self.refresh()

    def note(self, message: str) -> None:
        pass

    def refresh(self) -> None:
        pass

    def finish(self) -> None:
        pass

    def line(self) -> str:
        text = (
            f"{self.done}/{self.total} done · {self.outcomes['passed']} passed · {self.outcomes['wrong']} wrong · "
            f"{self.outcomes['failed']} failed ({self.infrastructure} infrastructure)"
        )
        if self.rate_limited:
            text += f" · {self.rate_limited} waiting on rate limits"
        return text


class PlainProgress(Progress):
    """A line every few seconds, for logs and CI."""

    def __init__(self) -> None:
        super().__init__()
        self._last = 0.0

    def start(self, total: int, experiment_id: str) -> None:
        super().start(total, experiment_id)
        self._print(f"experiment {experiment_id}: {total} trials to run")

    def refresh(self) -> None:
        now = time.monotonic()
        if now - self._last >= PLAIN_EVERY_SECONDS:
            self._last = now
            self._print(self.line())

    def note(self, message: str) -> None:
        self._print(visible(message))  # notes quote case ids, which come from the dataset

    def finish(self) -> None:
        self._print(self.line())

    def _print(self, text: str) -> None:
        self._shown(lambda: print(text, file=sys.stderr, flush=True))


class BarProgress(Progress):
    """A rich progress bar with the counts on a line of their own, including calls waiting on rate limits,
    so a run never looks stuck and nothing is cut off on a narrow terminal."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Group
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, TaskProgressColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress
        from rich.text import Text

        self._bar = RichProgress(BarColumn(), MofNCompleteColumn(), TaskProgressColumn(), TimeElapsedColumn())
        self._status = Text()
        self._live = Live(Group(self._bar, self._status), refresh_per_second=8, transient=False)
        self._task: Any = None

    def start(self, total: int, experiment_id: str) -> None:
        super().start(total, experiment_id)
        self._shown(self._live.start)
        self._note(f"experiment {experiment_id}: {total} trials to run")
        self._task = self._bar.add_task("trials", total=total)

    def refresh(self) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=self.done)
            self._status.plain = self.line().split(" done · ", 1)[1]

    def note(self, message: str) -> None:
        self._note(visible(message))  # notes quote case ids, which come from the dataset

    def finish(self) -> None:
        self.refresh()
        self._shown(self._live.stop)

    def _note(self, message: str) -> None:
        self._shown(lambda: self._live.console.print(message, markup=False, highlight=False))
