"""The ``agenteval`` command: a thin layer over the Python API."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import click

from .collect._settings import (
    BEHIND_COLLECTOR_PORT,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_GRPC_PORT,
    DEFAULT_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_SCORE_DELAY,
    ENV_TOKEN,
)
from .dataset._limits import MAX_CORPUS_MB, MAX_TOTAL_MB
from .errors import AgentevalError
from .render._tables import FORMATS
from .render._text_safety import visible
from .run._options import (
    DEFAULT_ALPHA,
    DEFAULT_ATTEMPTS,
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_DROP,
    DEFAULT_MAX_INFRA,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_STEPS,
    DEFAULT_PASS_RATE,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_RESCORE_BATCH,
    DEFAULT_TARGET_POWER,
    DEFAULT_TIMEOUT,
    MAX_ALPHA,
    MIN_CASES_PER_CATEGORY,
    NEAR_DUPLICATE_SIMILARITY,
)
from .store._limits import DEFAULT_MEMORY_LIMIT, SERVER_MEMORY_LIMIT, SERVER_STATEMENTS, shown_size

if TYPE_CHECKING:  # the collector is imported when the command runs
    from .collect import CollectStats


def refuse_other_digits(
    kind: click.ParamType, value: Any, param: click.Parameter | None, ctx: click.Context | None
) -> None:
    """Fail unless a number given as text is written in ASCII: Python's ``float`` and ``int``, which click's number
    types call, read other scripts' digits (``--alpha ٣`` was 3.0, ``３`` too), so a look-alike pasted from
    elsewhere became a figure nobody meant."""
    if isinstance(value, str) and not value.isascii():
        kind.fail(f"{value!r} is not a number written with the digits 0-9", param, ctx)


class AsciiNumber(click.ParamType):
    """A number option's type (mixed in before click's): :func:`refuse_other_digits`, then click's conversion."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        refuse_other_digits(self, value, param, ctx)
        return super().convert(value, param, ctx)


class Int(AsciiNumber, click.types.IntParamType):
    """click's INT, in ASCII digits."""


class Float(AsciiNumber, click.types.FloatParamType):
    """click's FLOAT, in ASCII digits."""


class IntRange(AsciiNumber, click.IntRange):
    """click's IntRange, in ASCII digits."""


class FloatRange(AsciiNumber, click.FloatRange):
    """click's FloatRange in ASCII digits, and without NaN, which compares false with both bounds and so passed every
    range check: the gate's limits then passed every test (``--max-drop nan`` let a significant drop through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number != number:  # NaN, the one float unequal to itself
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


class MemorySize(click.ParamType):
    """A size such as ``500MB`` or ``4GB`` (DuckDB's units), as bytes."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        refuse_other_digits(self, value, param, ctx)
        from .store._limits import parse_size

        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def memory_limit_option(
    option: str, default: int, help_text: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``option SIZE``: the memory a statement of the user's own may use."""
    return click.option(
        option,
        "memory_limit",
        type=MemorySize(),
        default=shown_size(default),
        show_default=True,
        metavar="SIZE",
        help=help_text,
    )


alpha_option = click.option(
    "--alpha",
    type=FloatRange(0, MAX_ALPHA, min_open=True, max_open=True),
    default=DEFAULT_ALPHA,
    show_default=True,
    help="Significance level of the one-sided tests, below 0.5 (0.025 is as strict as a two-sided 95% test).",
)
"""``--alpha``, shared by ``gate`` and ``power``."""


def store_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--store DIR``, shared by every command that reads or writes the store."""
    return click.option(
        "--store",
        type=click.Path(file_okay=False),
        default=None,
        help="Store folder, or object-storage prefix (s3://BUCKET/PREFIX, gs://, az://) "
        "[default: $AGENTEVAL_STORE or ./.agenteval].",
    )(fn)


def judge_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--judge MODEL`` and ``--judge-base-url URL``, shared by run and rescore."""
    fn = click.option(
        "--judge-base-url", metavar="URL", help="Where the judge is served (an OpenAI-compatible server)."
    )(fn)
    return click.option(
        "--judge",
        metavar="PROVIDER/MODEL",
        help="Grade answers with an LLM judge (e.g. openai/gpt-4o-mini), which then decides whether an answer is "
        "right.",
    )(fn)


def request_options(stored: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--request-timeout`` and ``--max-retries``, for every command that calls a model. ``stored``: a run's,
    which default to None so that a resume left without them keeps the run's."""

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option(
            "--max-retries",
            type=IntRange(min=0),
            default=None if stored else DEFAULT_MAX_RETRIES,
            show_default=str(DEFAULT_MAX_RETRIES),
            help="Times a model request that failed transiently (429, 5xx, a dropped connection, a timeout) is sent "
            "again.",
        )(fn)
        return click.option(
            "--request-timeout",
            type=FloatRange(0, min_open=True),
            default=None if stored else DEFAULT_REQUEST_TIMEOUT,
            show_default=f"{DEFAULT_REQUEST_TIMEOUT:g}",
            metavar="SECONDS",
            help="The longest one model request may take (for a streamed answer, the longest silence); raise it for "
            "a slow local model.",
        )(fn)

    return add


def model_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options of the reference agent, simulated users and the response cache (``run``)."""
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        click.option(
            "--model",
            metavar="PROVIDER/MODEL",
            help="Run the built-in reference agent with this model (openai/gpt-4o-mini, anthropic/..., or "
            "openai/NAME on an OpenAI-compatible server with --base-url).",
        ),
        click.option(
            "--base-url",
            metavar="URL",
            help="Where --model is served: vLLM, Ollama, llama.cpp, LM Studio, a gateway "
            "[default: $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL, else the provider's].",
        ),
        click.option("--temperature", type=Float(), help="The model's sampling temperature."),
        click.option("--max-tokens", type=IntRange(min=1), help="The most tokens one model reply may have."),
        click.option(
            "--max-steps",
            type=IntRange(min=1),
            show_default=str(DEFAULT_MAX_STEPS),
            help="Model calls the reference agent may make per user turn before max_steps_exceeded.",
        ),
        click.option(
            "--corpus",
            type=click.Path(dir_okay=False, exists=True),
            help="A corpus JSONL file for the search_documents tool (agenteval generate writes one).",
        ),
        click.option(
            "--max-corpus-mb",
            type=FloatRange(0, min_open=True),
            show_default=f"{MAX_CORPUS_MB:g}",
            help="The most the --corpus file may hold, in MB (it is held and indexed in memory).",
        ),
        judge_options,
        click.option(
            "--simulate-users",
            metavar="PROVIDER/MODEL",
            help="Play the cases' simulated users with this model (up to each case's max_turns).",
        ),
        click.option("--simulator-base-url", metavar="URL", help="Where --simulate-users is served."),
        click.option(
            "--simulator-max-tokens",
            type=IntRange(min=1),
            help="The most tokens one simulated user's message may have (a message cut there is a simulator_error).",
        ),
        click.option(
            "--skip-simulated",
            is_flag=True,
            default=None,
            help="Without --simulate-users, leave out cases with a simulated user (reported as not run) "
            "instead of refusing to run.",
        ),
        click.option(
            "--cache",
            is_flag=False,
            flag_value=STORE_CACHE,
            default=None,
            metavar="[DIR]",
            help="Answer repeated model requests from a cache, for development: the same case and attempt "
            "get the same answer again, other attempts never share one [default DIR: the store's .model-cache/].",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


STORE_CACHE = "store"
"""``--cache`` given without a folder: the store's own cache folder."""


def trace_window_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--since`` and ``--service``: which production traces a command covers."""
    fn = click.option("--service", metavar="NAME", help="Only traces of this service (its service.name).")(fn)
    return click.option(
        "--since",
        metavar="WHEN",
        help="Only traces started since WHEN: a day (2026-12-01), an ISO 8601 time, or an age back from now (7d, 12h).",
    )(fn)


def trace_policy_options(given_with: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--sample``, ``--max-tool-calls`` and ``--must-not-contain``: how production traces are scored, for
    ``rescore --traces`` and ``collect --score`` alike (``given_with`` names the option they go with)."""

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option(
            "--must-not-contain",
            "forbidden",
            multiple=True,
            metavar="TEXT",
            help=f"With {given_with}: text no reply may contain (repeatable).",
        )(fn)
        fn = click.option(
            "--max-tool-calls",
            type=IntRange(min=0),
            help=f"With {given_with}: the tool-call budget of step_efficiency.",
        )(fn)
        return click.option(
            "--sample",
            type=FloatRange(0, 1, min_open=True),
            default=1.0,
            show_default=True,
            help=f"With {given_with}: the share of traces to score, chosen by trace id as OpenTelemetry's ratio "
            "sampler does.",
        )(fn)

    return add


def format_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)(fn)


def echo_table(table: Any, fmt: str) -> None:
    """A query result rendered in ``fmt`` on stdout, and on stderr what the format could not keep (JSON has no NaN
    or infinity): stdout stays the result alone for the program that reads it."""
    from .render._tables import render_noted

    text, notes = render_noted(table, fmt)
    echo_rendered(text, fmt)
    for note in notes:
        click.echo(note, err=True)


def echo_rendered(text: str, fmt: str, end: str = "\n") -> None:
    """A rendered query result on stdout. CSV is the one format that holds values raw: on a terminal they show
    as escapes, as in every table; elsewhere (a file, a program) they go out exactly, which click's echo would
    not do (it strips ANSI sequences from what is not a terminal, so stored ids lost bytes on the way)."""
    if fmt == "csv" and sys.stdout.isatty():
        text = visible(text, newlines=True)
    click.echo(text + end, nl=False, color=True)  # color=True: written as it is, never stripped


@contextlib.contextmanager
def _sigterm_as_ctrl_c() -> Iterator[None]:
    """SIGTERM (a scheduler, ``kill``) stops a run as Ctrl-C does, also before the run takes both signals over and
    after it hands them back (starting, summing up): by default it would end the process without a word."""
    import signal

    try:
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    except ValueError:  # not the main thread: the host's handlers stay
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """While the run lasts, what the agent prints (its own code, a child process it starts) goes to stderr:
    with ``--json`` stdout carries the summary alone, for ``jq`` or another program to read."""
    sys.stdout.flush()
    try:
        saved = os.dup(1) if sys.stdout.fileno() == 1 else None
    except (AttributeError, OSError, ValueError):  # not a file (a test runner's capture)
        saved = None
    if saved is not None:
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def shown_error(exc: BaseException) -> str:
    """An error's message for the terminal, a line for each of its lines (:meth:`AgentevalError.lines`), each with
    its control and bidirectional characters and line breaks as escapes: messages quote paths, files and ids. The
    newlines of another library's error (DuckDB's point at the statement) are its own; the other breaks
    ``str.splitlines`` knows (a carriage return, NEL, U+2028) come from the values it quotes, and show as escapes."""
    from agenteval_instrumentation.masking import mask_text

    if not isinstance(exc, AgentevalError):
        return visible(mask_text(str(exc)), newlines=True)
    return "\n".join(visible(mask_text(line)) for line in exc.lines())


def _debugging() -> bool:
    context = click.get_current_context(silent=True)
    return bool(context and context.find_root().params.get("debug"))


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (``agenteval sql ... | head``): poll reports an error
    on the writing end of such a pipe, so a broken pipe elsewhere (a socket to object storage) is never taken
    for it."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll on this platform, or stdout is no file (a test's capture)
        return False


def _stop_quietly_if_reader_gone(exc: BaseException) -> None:
    """A reader that took what it wanted and closed the pipe is no error to report: exit 1 without a word, with
    stdout pointed at devnull so that Python's flush at exit raises nothing more (Python's own advice)."""
    if isinstance(exc, BrokenPipeError) and _stdout_reader_gone():
        _drop_unwritten_output()
        sys.exit(1)


def _reopen_stdout_if_an_agent_closed_it() -> None:
    """An agent that closed ``sys.stdout`` (its own code runs in this process) left the summary nowhere to go: it
    ended the command in a traceback and exit 1 after a run that had saved everything. The standard streams do not
    own their file descriptor, so a new stream on it takes the summary."""
    if not getattr(sys.stdout, "closed", False):
        return
    with contextlib.suppress(OSError, ValueError):
        sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
        click.echo("agenteval: the agent closed sys.stdout; the summary is written to a new stream", err=True)


def _drop_unwritten_output() -> None:
    """Point stdout at devnull: what is left in its buffer is never written, so Python's flush at exit neither
    raises (a reader gone) nor waits forever (a reader that stopped reading, its pipe full)."""
    with contextlib.suppress(OSError, ValueError):  # no file behind stdout (a test's capture)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _raise_as_one_line(exc: Exception) -> NoReturn:
    """An expected problem as one line: an AgentevalError through the group's handler (its own exit code),
    any other as a ClickException (exit 1); with --debug, the traceback."""
    if isinstance(exc, AgentevalError) or _debugging():
        raise exc
    raise click.ClickException(shown_error(exc)) from exc


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Expected problems (bad SQL, a missing file) print one clear line, not a traceback."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        import duckdb

        try:
            return fn(*args, **kwargs)
        except (duckdb.Error, OSError, ValueError) as exc:
            _stop_quietly_if_reader_gone(exc)
            _raise_as_one_line(exc)

    return run


def existing_store(store: str | None) -> Any:
    """The store for a command that only reads: a folder that is not there is a one-line error, never created."""
    from .store import NoStore, Store

    target = Store(store)
    try:
        target.require()
    except NoStore as exc:
        raise click.ClickException(shown_error(exc)) from None
    return target


def _show_warning(message: Warning | str, *args: Any, **kwargs: Any) -> None:
    """A warning from the library (a sample larger than the dataset, ...) as one line, not a source line; masked, as
    another library's warning may quote a URL with its key."""
    from agenteval_instrumentation.masking import mask_text

    click.echo(f"warning: {visible(mask_text(str(message)))}", err=True)


class _Commands(click.Group):
    """The one handler of user errors: an :class:`AgentevalError` from any command is one line and its
    exit code; anything else is a bug and keeps its traceback. ``--debug`` shows tracebacks for both. While a
    command runs, every log record of the process is masked: what reaches stderr is the command's to show, and so
    are the tracebacks Python prints."""

    def invoke(self, ctx: click.Context) -> Any:
        # Here, not in main(): `agenteval --help` never gets here, and needs neither logging nor the masking (6 ms).
        from ._stderr_masking import every_log_record_masked, mask_uncaught_tracebacks

        mask_uncaught_tracebacks()
        try:
            with warnings.catch_warnings(), every_log_record_masked():
                warnings.showwarning = _show_warning  # restored on the way out
                return super().invoke(ctx)
        except AgentevalError as exc:
            if ctx.params.get("debug"):
                raise
            click.echo(f"Error: {shown_error(exc)}", err=True)
            ctx.exit(exc.exit_code)
        except Exception as exc:
            _stop_quietly_if_reader_gone(exc)
            from .store._doctor import damaged_store_message
            from .store._store import unreachable_store_message

            damaged = damaged_store_message(exc) or unreachable_store_message(exc)
            if damaged is None or ctx.params.get("debug"):
                raise
            click.echo(f"Error: {visible(damaged)}", err=True)
            ctx.exit(1)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agenteval")
@click.option("--debug", is_flag=True, help="Show the traceback of any error.")
def main(debug: bool) -> None:
    """Trace and evaluate AI agents with OpenTelemetry."""


@main.command()
@click.argument("questions", nargs=-1)
@store_option
def demo(questions: tuple[str, ...], store: str | None) -> None:
    """Run a small decorated agent, write its spans to the store and show them."""
    from ._demo import run_demo

    click.echo(run_demo(list(questions) or None, store))


@main.command()
@click.argument("query")
@store_option
@format_option
@memory_limit_option(
    "--memory-limit",
    DEFAULT_MEMORY_LIMIT,
    "Memory the statement may use, and this command grow by (e.g. 500MB, 16GB); past it, it stops with an error.",
)
@user_errors
def sql(query: str, store: str | None, fmt: str, memory_limit: int) -> None:
    """Run a read-only SQL QUERY over the store's views: experiments, cases, trials, spans, scores, reviews (current,
    as reports give them), experiment_history, trial_history, score_history, review_history (every row as
    written), and traces, trace_scores (production traces). One statement: SELECT, WITH, FROM, VALUES, DESCRIBE,
    SHOW, SUMMARIZE or EXPLAIN; nothing is written."""
    from .render._tables import rendered_pieces
    from .store._limits import process_memory_capped

    target = existing_store(store)
    notes: list[str] = []
    # The first statement starts DuckDB's allocator's threads and arenas and loads pyarrow and numpy (OpenBLAS's
    # buffers): over 100 MB of data, taken before the cap so the limit is the statement's, not the start-up's
    # (`SELECT 1` failed under --memory-limit 100MB).
    with target.read_batches("SELECT 1 AS warm_up") as reader:
        "".join(rendered_pieces(reader.schema.names, reader, fmt, []))
    with process_memory_capped(memory_limit, "--memory-limit"):
        # Printed as read: what is held is a batch of rows (the table format: the 1,000 rows it draws), not the result.
        with target.read_batches(query, memory_limit=memory_limit) as reader:
            for piece in rendered_pieces(reader.schema.names, reader, fmt, notes):
                echo_rendered(piece, fmt, end="")
    click.echo("")
    for note in notes:
        click.echo(note, err=True)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
def validate(file: str) -> None:
    """Check a dataset FILE (and its card, if it has one): every bad line is listed with its field. Exit 1 if any,
    or if it has no case."""
    from .dataset._card import card_path, read_card
    from .dataset._cases import DatasetError, load_file
    from .render._counted import counted

    try:
        dataset = load_file(file)
    except DatasetError as exc:
        click.echo(shown_error(exc), err=True)  # one problem a line; they quote the file
        count = len(exc.problems) + exc.more
        click.echo(visible(f"{file}: {count} problem{'s' if count != 1 else ''}"), err=True)
        raise SystemExit(1) from None
    categories = counted(len(dataset.categories()), "category", "categories")
    try:
        card = read_card(file)
    except DatasetError as exc:  # the cases are valid; the card beside them is not
        click.echo(visible(f"{file}: {counted(len(dataset), 'case')} in {categories}, all valid"))
        click.echo(shown_error(exc), err=True)
        count = len(exc.problems)
        click.echo(visible(f"{card_path(file)}: {count} problem{'s' if count != 1 else ''}"), err=True)
        raise SystemExit(1) from None
    click.echo(visible(f"{file}: {counted(len(dataset), 'case')} in {categories}, all valid"))
    if card is not None:
        click.echo(visible(f"{card_path(file)}: valid, version {card.version}, kept by {card.owner}"))


@main.command()
@click.argument("documents", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-n", "count", type=IntRange(min=1), default=50, show_default=True, help="Questions to ask for.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The cases file (JSONL).")
@click.option(
    "--corpus-out", required=True, type=click.Path(dir_okay=False), help="The corpus file for the search tool."
)
@click.option(
    "--unanswerable",
    type=FloatRange(0, 1),
    default=0.1,
    show_default=True,
    help="Share of questions the documents do not answer (expected: unknown).",
)
@click.option("--model", required=True, metavar="PROVIDER/MODEL", help="The model that drafts the questions.")
@click.option("--base-url", metavar="URL", help="Where the model is served (an OpenAI-compatible server).")
@click.option("--seed", type=Int(), default=0, show_default=True, help="Which passages are chosen.")
@click.option(
    "--max-total-mb",
    type=FloatRange(min=0, min_open=True),
    default=MAX_TOTAL_MB,
    show_default=True,
    help="The most the documents may hold together, in MB; checked before any is read.",
)
@request_options()
@click.option("--force", is_flag=True, help="Overwrite -o and --corpus-out if they exist.")
def generate(
    documents: tuple[str, ...],
    count: int,
    output: str,
    corpus_out: str,
    unanswerable: float,
    model: str,
    base_url: str | None,
    seed: int,
    max_total_mb: float,
    request_timeout: float,
    max_retries: int,
    force: bool,
) -> None:
    """Draft a dataset from .md and .txt DOCUMENTS: one question per passage whose short answer is stated in it
    (relevant_docs links them), about --unanswerable of them unanswerable; a question whose answer is not in
    its passage is dropped. Writes the cases and the corpus for the search tool."""
    from ._output_files import check_writable, write_jsonl_files
    from .dataset._generate import check_outputs, dropped_counts, nothing_kept
    from .dataset._generate import generate as draft
    from .models._model import named_model

    def progress(done: int, total: int) -> None:
        if done == total or done % max(1, total // 10) == 0:
            click.echo(f"asked {done}/{total} passages", err=True)

    outputs = (("-o", output), ("--corpus-out", corpus_out))
    check_outputs(documents, outputs, force=force)
    for option, path in outputs:
        # Said before the model is asked: a missing or read-only folder found at the end cost every call, for nothing.
        check_writable(option, path)
    made = draft(
        documents,
        named_model(model, "--model", base_url=base_url, request_timeout=request_timeout, max_retries=max_retries),
        count=count,
        unanswerable=unanswerable,
        seed=seed,
        max_total_mb=max_total_mb,
        on_progress=progress,
    )
    if made.interrupted and not made.cases:
        click.echo("interrupted before any question was kept: nothing written", err=True)
        raise SystemExit(130)
    if not made.cases:
        raise nothing_kept(made, output)
    cases = (case.to_dict() for case in made.cases)
    passages = (passage.to_document() for passage in made.passages)
    # Together: cases whose relevant_docs name passages of a corpus that failed to be written are no dataset.
    write_jsonl_files([("-o", output, cases), ("--corpus-out", corpus_out, passages)], force=force)
    unknown = sum(case.expected_output == "unknown" for case in made.cases)
    click.echo(
        f"wrote {len(made.cases)} cases ({unknown} unanswerable) to {visible(output)} and {len(made.passages)} "
        f"passages to {visible(corpus_out)}; {len(made.dropped)} of {made.asked} dropped"
    )
    for reason, n in dropped_counts(made.dropped):
        click.echo(f"  dropped {n}: {visible(reason)}")
    click.echo(
        f"run it with: agenteval run --dataset {visible(output)} --corpus {visible(corpus_out)} --model {model}\n"
        "Read the questions before you trust them: drop the wrong or ambiguous ones (agenteval validate checks "
        "the format, not the content)."
    )
    if made.interrupted:  # the questions paid for are written; 130 says the run did not finish (128 + SIGINT)
        click.echo(f"interrupted after {made.asked} passages were answered: wrote the cases drafted by then", err=True)
        raise SystemExit(130)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def datasets(as_json: bool) -> None:
    """List the built-in datasets with their case counts and categories."""
    import dataclasses
    import json

    from .dataset._catalog import catalog

    entries = catalog()
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(e) for e in entries], indent=2))
        return
    from rich.console import Console

    from .render._console import catalog_view

    Console().print(catalog_view(entries))


@main.command()
@click.argument("dataset")
@click.option(
    "--min-per-category",
    type=IntRange(min=1),
    default=MIN_CASES_PER_CATEGORY,
    show_default=True,
    help="Categories with fewer cases are reported as too thin to measure.",
)
@click.option(
    "--similarity",
    type=FloatRange(0.0, 1.0, min_open=True),
    default=NEAR_DUPLICATE_SIMILARITY,
    show_default=True,
    help="Word-set similarity (shared words over all their words) from which two inputs count as "
    "near-duplicates; above 0, as inputs sharing no word are at 0.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def audit(dataset: str, min_per_category: int, similarity: float, as_json: bool, quiet: bool) -> None:
    """Audit a DATASET (file or built-in name): coverage, thin categories, duplicate, reordered and alike inputs."""
    import dataclasses
    import json

    from .dataset._audit import PROGRESS_FROM_CASES
    from .dataset._audit import audit as audit_dataset
    from .dataset._cases import DatasetError
    from .dataset._catalog import load_dataset
    from .run._progress import following, progress_output

    try:
        loaded = load_dataset(dataset)
        long = len(loaded.cases) >= PROGRESS_FROM_CASES
        output = progress_output("none" if quiet or as_json or not long else "auto")
        compared = following(
            output, lambda total: f"looking for near-duplicates among {total} distinct inputs", "inputs"
        )
        report = audit_dataset(loaded, min_per_category=min_per_category, similarity=similarity, on_progress=compared)
    except DatasetError as exc:
        # The problems quote the file (its field names, its ids): shown as validate shows them, escapes visible.
        message = f"the dataset has problems; run agenteval validate first\n{shown_error(exc)}"
        raise click.ClickException(message) from exc
    if as_json:
        record = dataclasses.asdict(report)
        record["review"] = None if report.review is None else report.review.to_dict()
        click.echo(json.dumps(record, indent=2))
        return
    from rich.console import Console

    from .render._console import audit_view

    Console().print(audit_view(report))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--owner", help="Who keeps the dataset (a person or team); needed for its first review.")
@click.option("--every", "every", type=IntRange(1, 1_000_000), help="Days between reviews (default 90; kept after).")
@click.option("--description", help="What the dataset is for, in a line.")
@click.option("--check", is_flag=True, help="Record nothing: exit 1 if a review is due or the cases changed.")
@click.option("--json", "as_json", is_flag=True, help="Print the card and its status as JSON.")
def review(
    file: str, owner: str | None, every: int | None, description: str | None, check: bool, as_json: bool
) -> None:
    """Record that the cases of dataset FILE were reviewed today, in its card (FILE's name with .card.json). The
    version goes up when the cases changed since the last review. With --check, say whether a review is due."""
    import datetime
    import json

    from .dataset._card import card_path, check_review, review_dataset, review_status
    from .dataset._cases import DatasetError
    from .errors import UsageError

    if check and (owner is not None or every is not None or description is not None):
        raise UsageError("--check records nothing: give --owner, --every and --description without it")
    try:
        if check:
            status = check_review(file)
            card = status.card
        else:
            waiting = f"{file}: waiting for another review of it to finish (agenteval review holds its lock)"
            card = review_dataset(
                file,
                owner=owner,
                review_every_days=every,
                description=description,
                on_wait=lambda: click.echo(visible(waiting), err=True),
            )
            status = review_status(card, card.reviewed_sha256 or "")
    except DatasetError as exc:
        raise click.ClickException(f"{shown_error(exc)}") from exc
    if as_json:
        click.echo(json.dumps(status.to_dict(), indent=2, ensure_ascii=False))
    elif check:
        said = "the review is current" if status.current else "a review is needed: " + "; ".join(status.reasons())
        click.echo(visible(f"{file}: version {card.version}, kept by {card.owner}; {said}"))
    else:
        due = card.last_reviewed + datetime.timedelta(days=card.review_every_days)
        click.echo(
            visible(
                f"{file}: reviewed {card.last_reviewed.isoformat()}, version {card.version}, kept by {card.owner}; "
                f"the next review is due by {due.isoformat()} ({card_path(file)})"
            )
        )
    if check and not status.current:
        raise SystemExit(1)


def _agent_options(values: tuple[str, ...]) -> dict[str, str]:
    options = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="--agent-option")
        options[key.strip()] = text
    return options


@main.command()
@click.option("--dataset", "-d", help="A built-in dataset name or a JSONL file.")
@click.option("--agent", "-a", "agent_spec", help="mock, a plugin's name, MODULE:ATTR or FILE.py:ATTR.")
# No click defaults for what a run stores: on --resume an option left out means "as the run was".
@click.option(
    "--attempts",
    type=IntRange(min=1),
    show_default=str(DEFAULT_ATTEMPTS),
    help="Trials per case; odd numbers avoid ties.",
)
@click.option("--concurrency", "-j", type=IntRange(min=1), show_default=str(DEFAULT_CONCURRENCY))
@click.option(
    "--timeout",
    type=Float(),  # its range, and NaN, are checked by the run's options, which say what they need
    show_default=str(DEFAULT_TIMEOUT),
    help="Seconds per trial.",
)
@click.option("--sample", type=IntRange(min=1), help="Run N cases spread across categories.")
@click.option("--sample-seed", type=Int(), show_default="0")
@click.option(
    "--cases",
    type=IntRange(min=1),
    help="How many cases the generated dataset (arithmetic) has; for another dataset use --sample.",
)
@click.option("--name", help="A name for the experiment (with --shard, the shards' shared id is derived from it).")
@click.option(
    "--experiment",
    "experiment_id",
    metavar="ID",
    help="The new experiment's id, instead of a generated one; every shard of one run gives the same.",
)
@click.option(
    "--shard",
    metavar="K/N",
    help="Run the K-th of N disjoint slices of the experiment (its cases, split by id), as one job of many; "
    "report and gate judge it once all N have completed.",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    help="How trials run: on this process (local, the default) or as tasks on a Ray cluster (ray; pip install "
    "'agenteval[ray]'), each writing to the store, which every node must reach.",
)
@click.option(
    "--ray-address",
    metavar="ADDR",
    help="The Ray cluster to run on (HOST:PORT), with --executor ray; default $RAY_ADDRESS, else a local one.",
)
@click.option(
    "--agent-option",
    "agent_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Passed to the agent factory as keyword arguments (repeatable).",
)
@click.option(
    "--resume",
    is_flag=False,
    flag_value="latest",
    default=None,
    metavar="[EXPERIMENT]",
    help="Re-run only the missing trials of EXPERIMENT (default: the newest interrupted one).",
)
@click.option(
    "--retry-failed",
    type=click.Choice(["infra", "all"]),
    help="With --resume, also re-run failed trials (infrastructure failures only, or all).",
)
@click.option("--prices", type=click.Path(dir_okay=False, exists=True), help="A JSON file of model prices.")
@click.option(
    "--scorer",
    "scorers",
    multiple=True,
    metavar="NAME|MODULE:ATTR",
    help="A scorer added to the built-ins, by a plugin's name or MODULE:ATTR (repeatable); a MODULE:ATTR scorer "
    "named like a built-in replaces it.",
)
@model_options
@request_options(stored=True)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def run(
    dataset: str | None,
    agent_spec: str | None,
    attempts: int | None,
    concurrency: int | None,
    timeout: float | None,
    sample: int | None,
    sample_seed: int | None,
    cases: int | None,
    name: str | None,
    experiment_id: str | None,
    shard: str | None,
    executor: str | None,
    ray_address: str | None,
    agent_options: tuple[str, ...],
    resume: str | None,
    retry_failed: str | None,
    prices: str | None,
    scorers: tuple[str, ...],
    model: str | None,
    base_url: str | None,
    temperature: float | None,
    max_tokens: int | None,
    max_steps: int | None,
    corpus: str | None,
    max_corpus_mb: float | None,
    judge: str | None,
    judge_base_url: str | None,
    simulate_users: str | None,
    simulator_base_url: str | None,
    simulator_max_tokens: int | None,
    skip_simulated: bool | None,
    cache: str | None,
    request_timeout: float | None,
    max_retries: int | None,
    store: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Run an agent (or, with --model, the built-in reference agent) over a dataset, several attempts per case,
    into the store."""
    from .run._memory import system_allocator_for_this_process

    system_allocator_for_this_process()  # before pyarrow is imported: see agenteval.run._memory
    from .run._runner import evaluate

    if resume is None and (not dataset or not (agent_spec or model)):
        raise click.UsageError("--dataset and --agent (or --model) are required (unless resuming with --resume)")
    if retry_failed and resume is None:
        raise click.UsageError("--retry-failed goes with --resume")
    with _sigterm_as_ctrl_c():
        _run_and_show(
            as_json,
            lambda: evaluate(
                agent_spec or "",
                dataset,
                attempts=attempts,
                concurrency=concurrency,
                timeout=timeout,
                sample=sample,
                sample_seed=sample_seed,
                cases=cases,
                name=name,
                store=store,
                agent_options=_agent_options(agent_options),
                resume=False if resume is None else True if resume == "latest" else resume,
                retry_failed=retry_failed,
                scorers=list(scorers),
                prices=prices,
                progress="none" if quiet or as_json else "auto",
                model=model,
                base_url=base_url,
                temperature=temperature,
                max_tokens=max_tokens,
                max_steps=max_steps,
                corpus=corpus,
                max_corpus_mb=max_corpus_mb,
                judge=judge,
                judge_base_url=judge_base_url,
                simulate_users=simulate_users,
                simulator_base_url=simulator_base_url,
                simulator_max_tokens=simulator_max_tokens,
                skip_simulated=skip_simulated,
                cache=True if cache == STORE_CACHE else cache,
                request_timeout=request_timeout,
                max_retries=max_retries,
                shard=shard,
                experiment_id=experiment_id,
                executor=executor,
                ray_address=ray_address,
            ),
        )


STOPPED_OUTSIDE_THE_RUN = (
    "stopped; what finished is saved: agenteval experiments shows how far the run got, and "
    "agenteval run --resume continues it if it did not complete"
)


def _run_and_show(as_json: bool, run: Callable[[], Any]) -> None:
    """Run, then print the run's summary. A Ctrl-C or SIGTERM the run's own handling did not take (before its
    trials began, or after they were saved) ends it with 130 and a word on what was kept, not click's "Aborted!"."""
    import json

    from .run._runner import stopped_after_saving
    from .run._starting import StoppedStarting
    from .run._trial import StopNow

    try:
        with _stdout_to_stderr() if as_json else contextlib.nullcontext():
            experiment = run()
    except (StopNow, StoppedStarting) as stop:  # a second Ctrl-C, or one before any trial: no summary, but what next
        click.echo(str(stop), err=True)
        raise SystemExit(130) from None
    except KeyboardInterrupt:  # while the run started or let go of the store: its record says how far it got
        click.echo(STOPPED_OUTSIDE_THE_RUN, err=True)
        raise SystemExit(130) from None
    except ValueError as exc:
        if isinstance(exc, AgentevalError) or _debugging():
            raise  # one line from the group's handler, or the traceback with --debug
        raise click.ClickException(shown_error(exc)) from exc
    _reopen_stdout_if_an_agent_closed_it()
    summary = experiment.summary
    assert summary is not None  # a run's own record always has one
    try:
        if as_json:
            click.echo(json.dumps(summary.to_dict(), indent=2, default=str))
        else:
            from .render._console import run_summary

            click.echo(run_summary(summary))
    except KeyboardInterrupt:  # stopped while the summary was written (to a pipe no one reads, perhaps): left out
        click.echo(stopped_after_saving(experiment.status, summary.resume, summary.report), err=True)
        _drop_unwritten_output()
        raise SystemExit(130) from None
    if experiment.status == "interrupted":
        raise SystemExit(130)


@main.command()
@click.argument("experiment", required=False)
@click.option(
    "--scorer",
    "scorers",
    multiple=True,
    metavar="NAME|MODULE:ATTR",
    help="Re-run only these scorers (repeatable). Default: the built-ins and the run's own.",
)
@click.option(
    "--batch-size",
    type=IntRange(min=1),
    default=DEFAULT_RESCORE_BATCH,
    show_default=True,
    help="Trials scored at a time; memory is bounded by this.",
)
@judge_options
@request_options()
@click.option(
    "--only-errors",
    is_flag=True,
    help="Score only the trials a scorer could not judge (a scorer_error: the judge's API was down); the other "
    "trials' scores stand.",
)
@click.option(
    "--otlp",
    is_flag=True,
    help="Also send the new scores to the OTLP backend OTEL_EXPORTER_OTLP_ENDPOINT names, as a run does.",
)
@click.option(
    "--traces", is_flag=True, help="Score production traces (spans outside any experiment) with reference-free scorers."
)
@trace_window_options
@trace_policy_options("--traces")
@click.option("--rubric", help="With --traces and --judge: what the judge grades replies against.")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def rescore(
    experiment: str | None,
    scorers: tuple[str, ...],
    batch_size: int,
    judge: str | None,
    judge_base_url: str | None,
    request_timeout: float,
    max_retries: int,
    only_errors: bool,
    otlp: bool,
    traces: bool,
    since: str | None,
    service: str | None,
    sample: float,
    max_tool_calls: int | None,
    forbidden: tuple[str, ...],
    rubric: str | None,
    store: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Score EXPERIMENT (default: the newest) again from its stored spans, without calling the agent; with
    --judge, grade its stored replies with an LLM judge. With --traces, score production traces with reference-free
    scorers (tool_errors; step_efficiency with --max-tool-calls; must_not_contain with --must-not-contain; the
    judge against --rubric): their scores go to the same scores table."""
    import dataclasses
    import json

    if traces and only_errors:
        raise click.UsageError("--only-errors goes with an experiment's trials, not --traces")
    if traces:
        _rescore_traces(
            experiment,
            scorers,
            batch_size,
            judge,
            judge_base_url,
            request_timeout,
            max_retries,
            otlp,
            since,
            service,
            sample,
            max_tool_calls,
            forbidden,
            rubric,
            store,
            as_json,
            quiet,
        )
        return
    if since or service or sample != 1.0 or max_tool_calls is not None or forbidden or rubric:
        raise click.UsageError(
            "--since, --service, --sample, --max-tool-calls, --must-not-contain and --rubric go with --traces"
        )
    from .analysis._experiments import summarize
    from .render._counted import counted
    from .render._text_safety import visible
    from .run._progress import following
    from .scorers._rescore import rescore as rescore_experiment
    from .store import Store

    target = Store(store)
    output = _rescore_progress(quiet or as_json)
    scored = following(output, lambda total: f"rescoring {counted(total, 'trial')}", "trials", batch_size + 1)

    def batch_done(done: int, total: int) -> None:
        scored(done, total)
        if done == total > batch_size:  # what follows the last batch takes a while too
            output.note(("sending the scores over OTLP, then " if otlp else "") + "saving the figures for reports")

    try:
        with _stdout_to_stderr() if as_json else contextlib.nullcontext():  # a plugin scorer's prints
            result = rescore_experiment(
                target,
                experiment,
                list(scorers),
                batch_size=batch_size,
                on_batch=batch_done,
                judge=judge,
                judge_base_url=judge_base_url,
                request_timeout=request_timeout,
                max_retries=max_retries,
                otlp=otlp,
                only_errors=only_errors,
            )
    except ValueError as exc:
        _raise_as_one_line(exc)
    figures = summarize(target, result.experiment_id)
    if as_json:
        click.echo(json.dumps({**dataclasses.asdict(result), "pass_rate": figures.pass_rate}, indent=2))
        return
    click.echo(
        f"pass {result.pass_id}: {result.scores} scores for {result.trials} trials of {result.experiment_id} "
        f"({visible(', '.join(result.scorers))}) in {result.seconds:.2f} s, "
        f"and {result.figures_seconds:.2f} s saving its figures for reports"
    )
    if result.otlp is not None:
        click.echo(f"OTLP: {result.otlp.spans_sent} evaluation spans sent, {result.otlp.spans_failed} failed")
    if result.not_scored:
        skipped = ", ".join(f"{name} ({count} trials)" for name, count in sorted(result.not_scored.items()))
        click.echo(
            f"not re-run, for want of message content (captured off when it ran): {visible(skipped)}; "
            "their earlier scores stand"
        )
    if result.without_case:
        click.echo(
            f"not re-run on {sum(result.without_case.values())} trials whose case is not in the store's cases table "
            f"({visible(', '.join(result.without_case))}); their earlier scores stand"
        )
    if result.still_running:
        click.echo(
            f"{result.experiment_id} is still running: this pass scored the {counted(result.trials, 'trial')} it had "
            "finished, and the run scores the rest with its own scorers; rescore it again once it ends"
        )
    if figures.pass_rate is not None:
        click.echo(
            f"pass rate with the current scores: {figures.pass_rate:.1%} "
            f"(passed {figures.passed} · wrong {figures.wrong} · failed {figures.failed})"
        )


def _rescore_progress(quiet: bool) -> Any:
    """Where a rescore shows its batches: as ``run`` shows its trials, and not with ``--quiet`` or ``--json``. It
    shows work of more than one batch: one (50,000 trials by default) is scored in a second or two."""
    from .run._progress import progress_output

    return progress_output("none" if quiet else "auto")


def _rescore_traces(
    experiment: str | None,
    scorers: tuple[str, ...],
    batch_size: int,
    judge: str | None,
    judge_base_url: str | None,
    request_timeout: float,
    max_retries: int,
    otlp: bool,
    since: str | None,
    service: str | None,
    sample: float,
    max_tool_calls: int | None,
    forbidden: tuple[str, ...],
    rubric: str | None,
    store: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """``rescore --traces``: online evaluation of production traces."""
    import dataclasses
    import json

    from .render._counted import counted
    from .run._progress import following
    from .scorers._traces import TracePolicy, score_traces
    from .store._windows import parse_since

    if experiment is not None:
        raise click.UsageError("give an EXPERIMENT or --traces, not both")
    if otlp:
        raise click.UsageError("--otlp sends an experiment's scores; it does not go with --traces")
    with _stdout_to_stderr() if as_json else contextlib.nullcontext():  # a plugin scorer's prints
        result = score_traces(
            existing_store(store),
            scorers=list(scorers),
            since=None if since is None else parse_since(since),
            service=service,
            policy=TracePolicy(max_tool_calls, tuple(forbidden), rubric),
            sample=sample,
            judge=judge,
            judge_base_url=judge_base_url,
            request_timeout=request_timeout,
            max_retries=max_retries,
            batch_size=batch_size,
            on_batch=following(
                _rescore_progress(quiet or as_json),
                lambda total: f"scoring {counted(total, 'production trace')}",
                "traces",
                batch_size + 1,
            ),
        )
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(result), indent=2))
        return
    failed = {0: "", 1: "; 1 sampled trace ended in error and is counted"}.get(
        result.failed, f"; {result.failed} sampled traces ended in error and are counted"
    )
    click.echo(
        f"pass {result.pass_id}: {result.scores} scores for {result.sampled - result.failed} of {result.traces} "
        f"production traces ({visible(', '.join(result.scorers))}) in {result.seconds:.2f} s"
        + (f"{failed} by type in agenteval report --traces instead" if failed else "")
    )
    if result.not_scored:
        click.echo(_traces_not_scored_line(result.not_scored))


def _traces_not_scored_line(not_scored: Mapping[str, int]) -> str:
    """The scorers that judged no trace for want of message content, said alike by ``rescore --traces`` and
    ``collect --score``."""
    skipped = ", ".join(f"{name} ({count} traces)" for name, count in sorted(not_scored.items()))
    return f"not scored, for want of message content (captured off): {visible(skipped)}"


@main.command(name="judge-check")
@click.argument("labels", type=click.Path(dir_okay=False, exists=True))
@click.option("--judge", required=True, metavar="PROVIDER/MODEL", help="The judge to measure.")
@click.option("--judge-base-url", metavar="URL", help="Where the judge is served (an OpenAI-compatible server).")
@request_options()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def judge_check_command(
    labels: str,
    judge: str,
    judge_base_url: str | None,
    request_timeout: float,
    max_retries: int,
    store: str | None,
    as_json: bool,
) -> None:
    """Measure a judge against human verdicts in LABELS (JSONL: trial_id or case and reply, and human pass/fail):
    agreement, Cohen's kappa with its 95% interval, and the items where they disagree."""
    import json

    from .render._console import judge_check_view
    from .scorers._judge_check import judge_check
    from .store import Store

    result = judge_check(
        labels,
        judge,
        base_url=judge_base_url,
        store=Store(store),
        request_timeout=request_timeout,
        max_retries=max_retries,
    )
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    click.echo(judge_check_view(result))


@main.command()
@click.argument("experiment", required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "text", "markdown", "json", "html"]),
    default="table",
    show_default=True,
    help="table (or text): tables for the terminal; markdown, json, or html (one self-contained page).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write to a file instead of the terminal (replaced whole, or left as it was); - is the terminal.",
)
@click.option("--traces", is_flag=True, help="Report on production traces (spans outside any experiment) instead.")
@trace_window_options
@click.option("--prices", type=click.Path(dir_okay=False, exists=True), help="With --traces: a JSON file of prices.")
@store_option
def report(
    experiment: str | None,
    fmt: str,
    output: str | None,
    traces: bool,
    since: str | None,
    service: str | None,
    prices: str | None,
    store: str | None,
) -> None:
    """Report on EXPERIMENT (default: the newest): pass rates with intervals, failures, latency, cost. With --traces,
    on production traces: calls, failures by type, latency percentiles, tokens and cost by model and by tool."""
    from .render import _report_formats, _traces_report
    from .render._tables import plain_text

    if output == "":  # `-o "$OUT"` with OUT unset: not "no -o", which prints the report
        raise click.UsageError("-o is empty: give the name of a file to write")
    if output == "-":  # the usual name of standard output, not a file called "-"
        output = None
    if traces:
        from .analysis._traces import build_traces_report
        from .run._prices import load_prices
        from .store._windows import parse_since

        if experiment is not None:
            raise click.UsageError("give an EXPERIMENT or --traces, not both")
        with _stdout_to_stderr():  # a failure plugin's prints, as it is imported or asked: stdout is the report's
            data: Any = build_traces_report(
                existing_store(store),
                since=None if since is None else parse_since(since),
                service=service,
                prices=load_prices(prices),
            )
        formats: Any = _traces_report.FORMATS
        to_terminal: Any = _traces_report.to_terminal
    else:
        from .analysis._saved_report import saved_report

        if since is not None or service is not None or prices is not None:
            raise click.UsageError("--since, --service and --prices go with --traces")
        data = saved_report(store, experiment)  # saved by the last writer, and current: no DuckDB needed
        if data is None:
            from .analysis._report import build_report

            try:
                data = build_report(existing_store(store), experiment)
            except ValueError as exc:
                _raise_as_one_line(exc)
        formats, to_terminal = _report_formats.FORMATS, _report_formats.to_terminal
    fmt = "table" if fmt == "text" else fmt
    if fmt == "table" and output is None:
        from rich.console import Console

        Console().print(to_terminal(data))
        return
    text = plain_text(to_terminal(data)) if fmt == "table" else formats[fmt](data)
    if output:
        from ._output_files import write_text

        write_text("-o", output, text)
        click.echo(f"wrote {visible(output)}")
    else:
        click.echo(text, nl=False)


@main.command(name="compare")
@click.argument("baseline")
@click.argument("candidate")
@store_option
@click.option("--json", "as_json", is_flag=True)
def compare_command(baseline: str, candidate: str, store: str | None, as_json: bool) -> None:
    """Compare CANDIDATE with BASELINE case by case: paired difference with its interval, what changed.
    Warns when either run is not completed, the datasets differ, or each ran cases the other did not."""
    import json

    from .analysis._compare import NotComparable, compare
    from .render._console import comparison_view
    from .render._text_safety import visible

    try:
        result = compare(existing_store(store), baseline, candidate)
    except NotComparable as exc:
        raise click.ClickException(shown_error(exc)) from exc
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
        for warning in result.warnings:  # the JSON holds them too; stderr keeps them in sight
            click.echo(f"warning: {visible(warning.message)}", err=True)
        return
    from rich.console import Console

    Console().print(comparison_view(result.to_dict()))


@main.command(name="gate")
@click.option("--baseline", required=True)
@click.option("--candidate", required=True)
@click.option(
    "--max-drop",
    type=FloatRange(0, 1),
    default=DEFAULT_MAX_DROP,
    show_default=True,
    help="Drops up to this much are tolerated.",
)
@alpha_option
@click.option(
    "--max-infra",
    type=FloatRange(0, 1),
    default=DEFAULT_MAX_INFRA,
    show_default=True,
    help="Refuse to judge when more than this share of either run failed for infrastructure reasons.",
)
@click.option(
    "--allow-incomplete",
    is_flag=True,
    help="Judge an interrupted, failed or still running experiment on the cases both ran, instead of refusing.",
)
@click.option(
    "--allow-different-datasets",
    is_flag=True,
    help="Judge experiments of different datasets (or of a changed dataset) by case id, instead of refusing.",
)
@click.option(
    "--allow-different-scorers",
    is_flag=True,
    help="Judge experiments whose pass/fail scorers (or their versions, a judge's model) differ, instead of refusing.",
)
@store_option
def gate_command(
    baseline: str,
    candidate: str,
    max_drop: float,
    alpha: float,
    max_infra: float,
    allow_incomplete: bool,
    allow_different_datasets: bool,
    allow_different_scorers: bool,
    store: str | None,
) -> None:
    """Exit 0 (no regression), 1 (a regression) or 3 (refused to judge, or any error) for CI."""
    import os

    from .analysis._compare import REFUSED, gate, with_step_summary
    from .render._text_safety import visible
    from .store import Store

    try:
        decision = gate(
            Store(store),
            baseline,
            candidate,
            max_drop=max_drop,
            alpha=alpha,
            max_infra=max_infra,
            allow_incomplete=allow_incomplete,
            allow_different_datasets=allow_different_datasets,
            allow_different_scorers=allow_different_scorers,
        )
        summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary_file:
            decision = with_step_summary(decision, summary_file, baseline, candidate)
    except Exception as exc:  # a bug: still exit 3, since CI reads exit 1 as a regression
        click.echo(f"gate: refused (exit {REFUSED})\n  internal error {type(exc).__name__}: {visible(exc)}", err=True)
        raise SystemExit(REFUSED) from None
    click.echo(f"gate: {decision.verdict} (exit {decision.exit_code})")
    for reason in decision.reasons:  # a line each; they quote stored names and paths: no escape code gets through
        click.echo("  " + visible(reason))
    raise SystemExit(decision.exit_code)


@main.command()
@click.option(
    "--pass-rate",
    type=FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help=f"The baseline pass rate [default: {DEFAULT_PASS_RATE}, or the --from experiment's].",
)
@click.option("--attempts", type=IntRange(min=1), default=None, help=f"[default: {DEFAULT_ATTEMPTS}, or --from's]")
@click.option("--cases", "cases_list", type=IntRange(min=2), multiple=True, help="Case counts to tabulate.")
@click.option("--drop", "drops", type=FloatRange(0, 1, min_open=True), multiple=True, help="Drops to tabulate.")
@alpha_option
@click.option(
    "--target-power",
    type=FloatRange(0, 1, min_open=True, max_open=True),
    default=DEFAULT_TARGET_POWER,
    show_default=True,
)
@click.option(
    "--spread",
    type=FloatRange(0, 0.5),
    default=None,
    help="Standard deviation of the cases' true pass rates [default: estimated from --from, else "
    "half the largest possible variance; the largest, sqrt(p(1 - p)), is every case all-or-nothing].",
)
@click.option(
    "--affected",
    type=FloatRange(0, 1, min_open=True),
    default=1.0,
    show_default=True,
    help="Share of the cases the drop falls on: 0.2 takes drop / 0.2 from a fifth of the cases (in proportion "
    "to their pass rates) and nothing from the rest.",
)
@click.option(
    "--max-drop",
    type=FloatRange(0, 1),
    default=DEFAULT_MAX_DROP,
    show_default=True,
    help="The gate's --max-drop: the paired chance is of the gate flagging the drop, which it does only past this "
    "(0: the test alone, as compare reads it).",
)
@click.option("--from", "from_experiment", help="Estimate pass rate, attempts and spread from this experiment.")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the table and assumptions as JSON.")
def power(
    pass_rate: float | None,
    attempts: int | None,
    cases_list: tuple[int, ...],
    drops: tuple[float, ...],
    alpha: float,
    target_power: float,
    spread: float | None,
    affected: float,
    max_drop: float,
    from_experiment: str | None,
    store: str | None,
    as_json: bool,
) -> None:
    """How likely a comparison is to catch a drop, and how many cases it takes. Each cell reads
    paired / unpaired: the paired comparison of compare and gate, then comparing two runs' pass rates
    each with its own error bar (the same cases), which catches far less when cases differ a lot."""
    import json

    from .analysis._power import build_model, default_drops, power_table

    try:
        model = build_model(
            pass_rate=pass_rate,
            attempts=attempts,
            spread=spread,
            alpha=alpha,
            affected=affected,
            store=store,
            from_experiment=from_experiment,
            max_drop=max_drop,
        )
    except ValueError as exc:
        _raise_as_one_line(exc)
    table = power_table(
        model, list(cases_list) or [25, 55, 100, 200, 400], list(drops) or default_drops(model), target_power
    )
    if as_json:
        click.echo(json.dumps(table.to_dict(), indent=2))
        return
    from rich.console import Console

    from .render._console import power_view

    Console().print(power_view(table))


@main.command()
@store_option
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to listen on; off loopback needs --token."
)
@click.option("--port", type=IntRange(0, 65535), default=8765, show_default=True, help="Port (0: any free one).")
@click.option(
    "--token",
    envvar="AGENTEVAL_DASHBOARD_TOKEN",
    help="A secret every visitor must present (required off loopback) [env: AGENTEVAL_DASHBOARD_TOKEN].",
)
@click.option(
    "--review-cases",
    "case_files",
    multiple=True,
    type=click.Path(dir_okay=False, exists=True),
    help="A file written by `agenteval generate` whose cases to accept or reject (repeatable).",
)
@click.option(
    "--sql-timeout",
    "sql_seconds",
    type=FloatRange(0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds a statement of the SQL page may run before it is stopped.",
)
@memory_limit_option(
    "--sql-memory-limit",
    SERVER_MEMORY_LIMIT,
    "Memory a statement of the SQL page or its downloads may use, in a worker process of its own (e.g. 500MB).",
)
@click.option(
    "--sql-workers",
    type=IntRange(1),
    default=SERVER_STATEMENTS,
    show_default=True,
    help="Statements of the SQL page or its downloads that may run at once; more are refused with a 503.",
)
def dashboard(
    store: str | None,
    host: str,
    port: int,
    token: str | None,
    case_files: tuple[str, ...],
    sql_seconds: float,
    memory_limit: int,
    sql_workers: int,
) -> None:
    """Serve a local web app over the store: experiments, an experiment's cases and plots, a trial's conversation,
    scores and span timeline, comparisons and the gate, human review, and read-only SQL. Needs
    `pip install 'agenteval[dashboard]'`."""
    from .dashboard import serve

    def ready(address: str) -> None:
        click.echo(f"agenteval dashboard at {address} (Ctrl+C stops it)", err=True)

    serve(
        store,
        host=host,
        port=port,
        token=token,
        case_files=case_files,
        sql_seconds=sql_seconds,
        sql_memory=memory_limit,
        sql_workers=sql_workers,
        on_ready=ready,
    )


@main.command()
@store_option
@format_option
def experiments(store: str | None, fmt: str) -> None:
    """List the experiments in the store, newest first."""
    import pyarrow as pa

    from .analysis._experiments import list_experiments

    rows = list_experiments(existing_store(store))
    for row in rows:
        row["pass_rate"] = None if row["pass_rate"] is None else round(row["pass_rate"], 3)
        row["pass_rate_ci95"] = None if row["pass_rate_ci95"] is None else [round(e, 3) for e in row["pass_rate_ci95"]]
    table = pa.Table.from_pylist(rows) if rows else pa.table({"experiment_id": pa.array([], pa.string())})
    echo_table(table, fmt)


@main.command(name="plugins")
@format_option
def plugins_command(fmt: str) -> None:
    """List the installed plugins (entry points in agenteval.scorers, agenteval.providers, agenteval.failures):
    the name to type, the distribution shipping it, its target, and whether it loads."""
    import dataclasses

    import pyarrow as pa

    from ._plugins import PluginStatus, check_plugins

    with _stdout_to_stderr():  # what a plugin prints as it is imported: stdout is the table's
        rows = check_plugins()
    columns = [field.name for field in dataclasses.fields(PluginStatus)]
    echo_table(pa.table({name: [getattr(row, name) for row in rows] for name in columns}), fmt)
    if not rows:  # on stderr: the table stays a table for whatever reads it
        click.echo(
            "no plugins installed: a distribution adds one with an entry point in agenteval.scorers, "
            "agenteval.providers or agenteval.failures (see the Plugins guide)",
            err=True,
        )
    for row in rows:
        if not row.loads:  # the table may be piped elsewhere; the problem stays in sight
            click.echo(f"warning: {visible(row.note or '')}", err=True)


DOCTOR_SHOWS_FROM = 500
"""Files from which the doctor shows its reading (a few milliseconds a file: 6,000 files took 30 s unseen)."""
COMPACT_SHOWS_FROM = 50
"""Partitions from which compact shows its progress (6,000 small files took 22 s unseen)."""


@main.command()
@store_option
@click.option(
    "--wait",
    type=FloatRange(min=0),
    default=None,
    help="Seconds to wait for another compaction of the store to finish [default: 300].",
)
@user_errors
def compact(store: str | None, wait: float | None) -> None:
    """Merge each partition's small files into one (safe while others read and write), keeping one row of each span
    stored twice, and save report figures."""
    from .analysis._saved_report import save_reports
    from .render._counted import counted
    from .run._progress import following, progress_output
    from .store import Store, StoreNotWritable
    from .store import compact as compact_store

    given: dict[str, Any] = {} if wait is None else {"wait": wait}
    target = Store(store)
    shown = following(
        progress_output(), lambda total: f"compacting {counted(total, 'partition')}", "partitions", COMPACT_SHOWS_FROM
    )
    result = compact_store(target, **given, save_missing_figures=True, drop_span_copies=True, on_progress=shown)
    save_reports(target, result.figures_refreshed)
    click.echo(
        f"compacted {result.partitions} partition(s): {result.files_before} files -> {result.files_after}, "
        f"{result.rows} rows; saved the report figures of {len(result.figures_refreshed)} experiment(s)"
    )
    if result.copies_dropped:
        click.echo(
            f"dropped {result.copies_dropped:,} span rows that repeated another row's (trace_id, span_id): the same "
            f"spans stored twice, now once ({result.rows + result.copies_dropped:,} rows read, {result.rows:,} "
            "written); send spans into the store one way only (see docs/export.md)"
        )
    if result.partitions_taken:
        click.echo(
            f"{result.partitions_taken} partition(s) were compacted meanwhile by another compaction, which took the "
            "store's lease while this one could not renew it (stopped, or the store did not answer); nothing was lost "
            "and nothing is left to do",
            err=True,
        )
    if result.partitions_skipped:
        click.echo(
            f"left {result.partitions_skipped} partition(s) as they were: a file could not be read; "
            "run agenteval doctor to set unreadable files aside",
            err=True,
        )
    if result.write_error is not None:
        raise StoreNotWritable.at(
            target.root, result.write_error, f"{result.partitions_unwritten} partition(s) left as they were"
        )


@main.command(name="cases-from-traces")
@click.option(
    "--where",
    required=True,
    metavar="SQL",
    help="A condition on the traces view, e.g. \"status = 'ERROR' AND service = 'shop'\" (read-only, as agenteval "
    "sql runs).",
)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The cases file (JSONL).")
@click.option("--force", is_flag=True, help="Overwrite the output file if it exists.")
@store_option
def cases_from_traces_command(where: str, output: str, force: bool, store: str | None) -> None:
    """Turn the conversations of production traces matching --where into dataset cases: input or turns from the
    trace, expected_output left empty for a person to fill, the trace id in metadata."""
    from .dataset._from_traces import cases_from_traces
    from .render._counted import counted

    result = cases_from_traces(existing_store(store), where, output, force=force)
    click.echo(
        f"wrote {counted(result.cases, 'case')} from {counted(result.matched, 'matching trace')} to "
        f"{visible(result.path)}; fill in each expected_output, then check the file with agenteval validate"
    )
    for reason in result.left_out():
        click.echo(f"left out {reason}", err=True)


@main.command()
@click.option("--older-than", required=True, metavar="AGE", help="Remove days that ended longer ago: 30d, 12h, 2w.")
@click.option("--service", metavar="NAME", help="Only this service's traces.")
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@store_option
@user_errors
def prune(older_than: str, service: str | None, dry_run: bool, store: str | None) -> None:
    """Remove production traces (and their scores) by whole days, each day's files deleted in place; experiments
    are never pruned."""
    from .store._prune import prune as prune_store
    from .store._windows import parse_age

    result = prune_store(existing_store(store), parse_age(older_than, "--older-than"), service=service, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for part in result.partitions:
        click.echo(visible(f"{verb} {part.table}/{part.partition}: {part.files} files, {part.rows:,} rows"))
    ended = f"days that ended before {result.cutoff:%Y-%m-%d %H:%M} UTC"
    if not result.partitions:
        click.echo(f"nothing to remove: no production traces of {ended}")
    else:
        removed = f"{len(result.partitions)} partition(s), {result.files} files, {result.rows:,} rows"
        click.echo(f"{verb} {removed} of {ended}")
    if result.kept_unsorted:
        click.echo(
            f"kept {result.kept_unsorted} files of those days written before spans had a folder per service; "
            "prune without --service removes them",
            err=True,
        )


@main.command()
@store_option
@click.option("--dry-run", is_flag=True, help="Only report unreadable files; move nothing.")
@user_errors
def doctor(store: str | None, dry_run: bool) -> None:
    """Read every file of the store; move unreadable ones to .quarantine/ and say what they held."""
    from .render._counted import counted
    from .run._progress import following, progress_output
    from .store import Store
    from .store._doctor import doctor as check_store

    shown = following(progress_output(), lambda total: f"reading {counted(total, 'file')}", "files", DOCTOR_SHOWS_FROM)
    report = check_store(Store(store), dry_run=dry_run, on_progress=shown)
    for problem in report.unreadable:
        held = f"{problem.rows:,} rows" if problem.rows is not None else "an unknown number of rows"
        where = f"moved to {problem.moved_to}" if problem.moved_to else "left in place (--dry-run)"
        what = f"{problem.table}, {problem.bytes:,} bytes, {held}"
        click.echo(visible(f"{problem.path}: unreadable ({problem.error}); {what}; {where}"))
    for folder in report.snapshots_removed:
        done = "removed" if not dry_run else "would be removed"
        click.echo(visible(f"{folder}: saved report figures that cannot be read, {done} (derived: nothing is lost)"))
    if report.healthy:
        click.echo(f"{report.files_checked} files checked: all readable")
    else:
        lost = {p.table for p in report.unreadable}
        click.echo(
            f"{report.files_checked} files checked, {len(report.unreadable)} unreadable ({', '.join(sorted(lost))})"
            + ("; trials lost from a run are re-run by agenteval run --resume EXPERIMENT" if "trials" in lost else "")
        )
    _say_span_copies(report.span_copies)
    if dry_run and not (report.healthy and report.copies == 0):
        raise SystemExit(1)


def _say_span_copies(copies: dict[str, int] | None) -> None:
    """What the doctor found of spans stored twice, and what to do."""
    if copies is None:
        click.echo("spans stored twice were not looked for: run without --dry-run to set unreadable files aside")
    elif copies:
        click.echo(
            f"{sum(copies.values()):,} span rows repeat another row's (trace_id, span_id) in {len(copies)} "
            "partition(s): the same spans stored twice (sent to the store both by setup_tracing() and through an "
            "agenteval collect writing it?), so counts over traces are too high. Run agenteval compact to keep one "
            "row of each, and send spans into the store one way only (see docs/export.md)"
        )


@main.command()
@click.option(
    "--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on; anything but loopback needs a token."
)
@click.option(
    "--port",
    type=IntRange(0, 65535),
    default=DEFAULT_HTTP_PORT,
    show_default=True,
    help=f"OTLP/HTTP port, POST /v1/traces (0: any free port; behind a Collector: {BEHIND_COLLECTOR_PORT}).",
)
@click.option(
    "--grpc-port",
    type=IntRange(0, 65535),
    default=DEFAULT_GRPC_PORT,
    show_default=True,
    help="OTLP/gRPC port (0: any free port).",
)
@click.option("--no-grpc", is_flag=True, help="Receive over HTTP only (behind a Collector, which holds 4317).")
@click.option(
    "--token",
    default=None,
    help=f"Bearer token clients must send; required off loopback [default: ${ENV_TOKEN}, which keeps it out of "
    "the process list].",
)
@click.option(
    "--max-body",
    type=IntRange(min=1024),
    default=DEFAULT_MAX_BODY_BYTES,
    show_default=True,
    help="Largest request in bytes, compressed or not (413 past it); a process holds twice this of request bodies "
    "at once (503 past it).",
)
@click.option(
    "--body-timeout",
    type=FloatRange(min=0, min_open=True),
    default=DEFAULT_BODY_TIMEOUT,
    show_default=True,
    help="Seconds an HTTP request's body may take to arrive whole after its headers (408 and the connection "
    "closed past it).",
)
@click.option(
    "--score",
    "score_names",
    multiple=True,
    metavar="NAME|MODULE:ATTR",
    help="Score each trace as it arrives with this scorer (repeatable): tool_errors, step_efficiency, "
    "must_not_contain, or your own; the scores land where rescore --traces puts them.",
)
@trace_policy_options("--score")
@click.option(
    "--score-delay",
    type=FloatRange(min=0),
    default=DEFAULT_SCORE_DELAY,
    show_default=True,
    help="With --score: seconds between a trace's root span arriving and the trace being scored.",
)
@click.option(
    "--workers",
    type=IntRange(min=1),
    default=1,
    show_default=True,
    help="Processes that receive OTLP/HTTP, each decoding and writing on a core of its own (see docs/collect.md "
    "for the spans per second one process takes); gRPC stays in the first.",
)
@store_option
def collect(
    host: str,
    port: int,
    grpc_port: int,
    no_grpc: bool,
    token: str | None,
    max_body: int,
    body_timeout: float,
    score_names: tuple[str, ...],
    sample: float,
    max_tool_calls: int | None,
    forbidden: tuple[str, ...],
    score_delay: float,
    workers: int,
    store: str | None,
) -> None:
    """Receive OTLP traces (HTTP and gRPC) into the store until SIGTERM or Ctrl-C, then write every span received;
    with --score, score each trace as it arrives, as rescore --traces would."""
    from .collect import Collector

    scorer = None
    if score_names:
        from .scorers._traces import TracePolicy, TraceScorer
        from .store import Store

        policy = TracePolicy(max_tool_calls, tuple(forbidden))
        scorer = TraceScorer(Store(store), list(score_names), policy=policy, sample=sample)
    elif sample != 1.0 or max_tool_calls is not None or forbidden:
        raise click.UsageError("--sample, --max-tool-calls and --must-not-contain go with --score")
    collector = Collector(
        store,
        host=host,
        port=port,
        grpc_port=None if no_grpc else grpc_port,
        token=token,
        max_body_bytes=max_body,
        body_timeout=body_timeout,
        score=scorer,
        score_delay=score_delay,
        workers=workers,
    )

    def announce() -> None:
        grpc = f", OTLP/gRPC on {host}:{collector.grpc_port}" if collector.grpc_port is not None else ""
        processes = f" (HTTP received by {workers} worker processes)" if workers > 1 else ""
        click.echo(
            f"agenteval collect: OTLP/HTTP on {collector.http_endpoint}{grpc}; "
            f"writing to {visible(str(collector.store))}{processes}"
        )
        click.echo("stop with Ctrl-C or SIGTERM: every span received is written first", err=True)

    collector.serve(ready=announce)
    stats = collector.stats()
    click.echo(
        f"agenteval collect: stopped; {stats.spans_written:,} spans written, {stats.spans_rejected:,} rejected, "
        f"{stats.requests_refused:,} requests refused while busy"
        + (f"; {stats.spans_repeated:,} spans sent again, stored once" if stats.spans_repeated else "")
        + (f"; {_scored_line(stats)}" if scorer is not None else "")
    )
    if stats.not_scored:
        click.echo(_traces_not_scored_line(stats.not_scored))
    if stats.spans_lost:
        raise AgentevalError(
            f"agenteval collect: {stats.spans_lost:,} acknowledged spans could not be written to {collector.store} "
            "(the errors above say why: a full disk, a folder that cannot be made)"
        )


def _scored_line(stats: CollectStats) -> str:
    """What online scoring did, worded as ``rescore --traces`` words it: the traces judged are those of the
    finished ones that the sample chose and that did not end in error."""
    return (
        f"{stats.scores_written:,} scores for {stats.traces_scored:,} of {stats.traces_finished:,} finished traces "
        "(the others not sampled, or ended in error)"
    )


if __name__ == "__main__":
    main()
