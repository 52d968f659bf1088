"""The ``agenteval`` command: a thin layer over the Python API."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from .tables import FORMATS


def store_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--store DIR``, shared by every command that reads or writes the store."""
    return click.option(
        "--store",
        type=click.Path(file_okay=False),
        default=None,
        help="Store folder [default: $AGENTEVAL_STORE or ./.agenteval].",
    )(fn)


def format_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)(fn)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Expected problems (bad SQL, a missing file) print one clear line, not a traceback."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        import duckdb

        try:
            return fn(*args, **kwargs)
        except (duckdb.Error, OSError, ValueError) as exc:
            raise click.ClickException(str(exc)) from exc

    return run


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agenteval")
def main() -> None:
    """Trace and evaluate AI agents with OpenTelemetry."""


@main.command()
@click.argument("questions", nargs=-1)
@store_option
def demo(questions: tuple[str, ...], store: str | None) -> None:
    """Run a small decorated agent, write its spans to the store and show them."""
    from .demo import run_demo

    click.echo(run_demo(list(questions) or None, store))


@main.command()
@click.argument("query")
@store_option
@format_option
@user_errors
def sql(query: str, store: str | None, fmt: str) -> None:
    """Run a SQL QUERY over the store's views: experiments, cases, trials, spans, scores."""
    from .store import Store
    from .tables import render

    click.echo(render(Store(store).query(query), fmt))


@main.command()
@store_option
@user_errors
def compact(store: str | None) -> None:
    """Merge each partition's small files into one (safe while others read)."""
    from .store import Store
    from .store import compact as compact_store

    result = compact_store(Store(store))
    click.echo(
        f"compacted {result.partitions} partition(s): {result.files_before} files -> {result.files_after}, "
        f"{result.rows} rows"
    )
