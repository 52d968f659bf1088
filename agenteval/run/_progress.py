"""What a person sees while long work goes (a run's trials, an audit's comparisons): a bar on a terminal, plain lines
otherwise, or nothing."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from ..render._counted import counted
from ..render._text_safety import visible

PLAIN_EVERY_SECONDS = 5.0


class Output:
    """Where progress is shown: nowhere (``none``, or ``--quiet``); :class:`Lines` and :class:`Bar` show it."""

    def __init__(self) -> None:
        self.gone = False
        """The output went away (a closed pipe, ``agenteval run 2>&1 | head``): the progress goes quiet."""

    def _shown(self, show: Callable[[], Any]) -> None:
        """``show()``; an output that cannot be written stops the progress, never the work (a run would lose
        the trials finished but not saved yet, and leave the experiment saying running)."""
        if self.gone:
            return
        try:
            show()
        except (OSError, ValueError):  # a broken pipe; ValueError: the file was closed under the work
            self.gone = True

    def start(self, heading: str, total: int, unit: str) -> None:
        """The work begins: ``heading`` says what it is, ``total`` how many ``unit`` it counts."""

    def update(self, done: int, counts: str) -> None:
        """``done`` of the total so far, and what else is counted (``counts``, shown beside)."""

    def note(self, message: str) -> None:
        """A line of its own; ``message`` is shown as it is, so quote untrusted text with ``visible``."""

    def finish(self, done: int, counts: str) -> None:
        """The work ended: the last figures stay on the screen."""


def progress_output(mode: str = "auto") -> Output:
    """``auto``: a live bar on a terminal, lines when stderr is redirected; ``plain``; ``none``."""
    if mode == "none":
        return Output()
    if mode == "plain" or not sys.stderr.isatty():
        return Lines()
    return Bar()


def following(
    output: Output, heading: Callable[[int], str], unit: str, from_total: int = 0
) -> Callable[[int, int], None]:
    """An ``on_progress(done, total)`` callback that shows the work on ``output``: started by its first call
    (``heading(total)`` says what the work is), finished when ``done`` reaches ``total``; work of fewer than
    ``from_total`` units ends too soon to need showing, and is not shown."""
    shown: Output | None = None

    def follow(done: int, total: int) -> None:
        nonlocal shown
        if shown is None:
            shown = output if total >= from_total else Output()
            shown.start(heading(total), total, unit)
        if done >= total:
            shown.finish(done, "")
        else:
            shown.update(done, "")

    return follow


class Lines(Output):
    """A line every few seconds on stderr, for logs and CI."""

    def __init__(self) -> None:
        super().__init__()
        self._total = 0
        self._last = 0.0

    def start(self, heading: str, total: int, unit: str) -> None:
        self._total = total
        self._print(heading)

    def update(self, done: int, counts: str) -> None:
        now = time.monotonic()
        if now - self._last >= PLAIN_EVERY_SECONDS:
            self._last = now
            self._print(self._line(done, counts))

    def note(self, message: str) -> None:
        self._print(message)

    def finish(self, done: int, counts: str) -> None:
        self._print(self._line(done, counts))

    def _line(self, done: int, counts: str) -> str:
        return f"{done}/{self._total} done · {counts}" if counts else f"{done}/{self._total} done"

    def _print(self, text: str) -> None:
        self._shown(lambda: print(text, file=sys.stderr, flush=True))


class Bar(Output):
    """A rich progress bar with the counts on a line of their own, so long work never looks stuck and nothing is
    cut off on a narrow terminal."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console, Group
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, TaskProgressColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress
        from rich.text import Text

        self._bar = RichProgress(BarColumn(), MofNCompleteColumn(), TaskProgressColumn(), TimeElapsedColumn())
        self._status = Text()
        self._live = Live(
            Group(self._bar, self._status), console=Console(stderr=True), refresh_per_second=8, transient=False
        )
        self._task: Any = None

    def start(self, heading: str, total: int, unit: str) -> None:
        self._shown(self._live.start)
        self.note(heading)
        self._task = self._bar.add_task(unit, total=total)

    def update(self, done: int, counts: str) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=done)
            self._status.plain = counts

    def note(self, message: str) -> None:
        self._shown(lambda: self._live.console.print(message, markup=False, highlight=False))

    def finish(self, done: int, counts: str) -> None:
        self.update(done, counts)
        self._shown(self._live.stop)


class Progress:
    """A run's counts of done, passed, wrong, failed and infrastructure failures, and calls waiting on rate limits,
    shown on an :class:`Output`."""

    def __init__(self, output: Output | None = None) -> None:
        self.output = output if output is not None else Output()
        self.total = 0
        self.done = 0
        self.outcomes = {"passed": 0, "wrong": 0, "failed": 0}
        self.infrastructure = 0
        self.rate_limited = 0

    @staticmethod
    def create(mode: str = "auto") -> Progress:
        """See :func:`progress_output`."""
        return Progress(progress_output(mode))

    def start(self, total: int, experiment_id: str) -> None:
        self.total = total
        self.output.start(f"experiment {experiment_id}: {counted(total, 'trial')} to run", total, "trials")

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
        self.output.note(visible(message))  # notes quote case ids, which come from the dataset

    def refresh(self) -> None:
        if type(self.output) is not Output:  # the counts' text is made per trial: not when nothing shows it
            self.output.update(self.done, self.counts())

    def finish(self) -> None:
        self.output.finish(self.done, self.counts())

    def counts(self) -> str:
        text = (
            f"{self.outcomes['passed']} passed · {self.outcomes['wrong']} wrong · "
            f"{self.outcomes['failed']} failed ({self.infrastructure} infrastructure)"
        )
        if self.rate_limited:
            text += f" · {self.rate_limited} waiting on rate limits"
        return text

    def line(self) -> str:
        return f"{self.done}/{self.total} done · {self.counts()}"
