"""The dashboard's web app: Starlette routes over the store, pages rendered server-side by Jinja2 (autoescaped).

Handlers are plain functions, which Starlette runs in a thread pool, since DuckDB calls block. Every figure comes
from :mod:`agenteval.analysis` (the report, the comparison, the gate) or :mod:`._queries` (the same views).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..analysis._compare import gate
from ..analysis._compare_figures import DIFFERENCE_HEADER, figure_rows, figures_note
from ..analysis._experiments import find
from ..analysis._report import build_report
from ..analysis._stats import shown_p
from ..errors import AgentevalError
from ..render._report_formats import category_plot, failure_plot, interval, latency_histogram, ms, pct, sections
from ..render._text_safety import visible
from ..store import Store
from ..store._limits import SERVER_MEMORY_LIMIT, SERVER_STATEMENTS
from . import _queries as q
from . import _review as review
from . import _sql as sql_page
from ._review import CaseFile
from ._security import CSRF_FIELD, Guard, same_site_path
from ._sql_download import MEDIA_TYPES, ResultFile
from ._sql_pool import RETRY_AFTER_SECONDS, SqlWorkers, WorkersBusy

HERE = Path(__file__).parent
RETRY_AFTER = {"Retry-After": str(RETRY_AFTER_SECONDS)}
"""The header of a statement refused because every SQL worker is busy (a 503)."""
REFRESH_SECONDS = 5
"""A running experiment's page reloads itself this often (a meta refresh: no script needed)."""
MOVED_SHOWN = 200
"""The newly failing (and newly passing) cases a comparison's page lists; ``agenteval compare --json`` gives all."""


def _shown(value: Any) -> Any:
    """What a ``{{ ... }}`` of a page shows of a text: its control and bidirectional characters as visible escapes
    (U+202E as ``<U+202E>``), as every report does, so that a case id or a reply cannot reorder or hide what is read;
    autoescaping then escapes it. Markup (the plots, ``|e``, ``|tojson``) is left as it is: a form's field that
    must send a value back as it is writes ``{{ value|e }}``."""
    return visible(value, newlines=True) if isinstance(value, str) and not isinstance(value, Markup) else value


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        finalize=_shown,
    )
    env.filters["u"] = lambda value: quote(str(value), safe="")
    env.filters["pct"] = pct
    env.filters["p"] = shown_p
    env.filters["interval"] = interval
    env.filters["ms"] = ms
    env.filters["num"] = lambda v: "–" if v is None else f"{v:,}"
    env.filters["usd"] = lambda v: "–" if v is None else f"${v:,.4f}"
    env.filters["signed"] = lambda v: "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.1%}"
    env.filters["ts"] = lambda v: "–" if v is None else str(v)[:16]  # to the minute, UTC
    return env


class Dashboard:
    """The pages, over one store, with the case files under review."""

    def __init__(
        self,
        store: Store,
        case_files: list[Path],
        sql_seconds: float = sql_page.SQL_SECONDS,
        sql_memory: int = SERVER_MEMORY_LIMIT,
        sql_workers: int = SERVER_STATEMENTS,
    ) -> None:
        self.store = store
        self.sql_seconds = sql_seconds
        self.sql_memory = sql_memory
        self.workers = SqlWorkers(str(store.root), sql_memory, sql_workers)
        self.case_files = [CaseFile(Path(p)) for p in case_files]
        self.env = _environment()

    def page(self, request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(template).render(
            csrf_field=CSRF_FIELD, csrf=request.state.csrf, store=str(self.store.root), **context
        )
        return HTMLResponse(html, status_code=status_code)

    def not_found(self, request: Request, what: str) -> HTMLResponse:
        return self.page(request, "error.html", 404, title="Not found", message=what)

    # --- pages ---------------------------------------------------------------------------------

    def experiments(self, request: Request, status_code: int = 200, message: str | None = None) -> Response:
        params = request.query_params
        filters = {key: params.get(key) or None for key in ("dataset", "status", "text")}
        page = _int(params.get("page"), 1)
        listed = q.experiments(self.store, filters["dataset"], filters["status"], filters["text"], page=page)

        def link(page: int) -> str:
            return "?" + urlencode({k: v for k, v in {**filters, "page": page}.items() if v not in (None, "")})

        return self.page(
            request,
            "experiments.html",
            status_code,
            listed=listed,
            filters=filters,
            choices=q.filter_choices(self.store),
            link=link,
            message=message,
        )

    def pick(self, request: Request) -> Response:
        picked = request.query_params.getlist("pick")
        if len(picked) != 2:
            return self.experiments(request, 400, f"pick exactly two experiments to compare ({len(picked)} picked)")
        started = {r["experiment_id"]: str(r["started_at"]) for r in self.store.rows(q.STARTED)}
        older, newer = sorted(picked, key=lambda eid: (started.get(eid, ""), eid))  # the older is the baseline
        return RedirectResponse(f"/compare/{quote(older, safe='')}/{quote(newer, safe='')}", status_code=303)

    def experiment(self, request: Request) -> Response:
        eid = request.path_params["experiment_id"]
        params = request.query_params
        sort = params.get("sort") or "case"
        descending = params.get("order") == "desc"
        filters = {key: params.get(key) or None for key in ("category", "outcome", "scorer")}
        with contextlib.closing(self.store.connect()) as con:  # one connection for the report and the cases
            try:
                found = find(self.store, eid, con=con)
            except ValueError as exc:  # the prefix of several experiments: the error names them
                return self.not_found(request, str(exc))
            if found is None:
                return self.not_found(request, f"no experiment {eid!r} in this store")
            eid = found.id
            report = build_report(self.store, eid, con=con)
            page = q.case_page(
                self.store,
                eid,
                page=_int(params.get("page"), 1),
                sort=sort,
                descending=descending,
                category=filters["category"],
                outcome=filters["outcome"],
                scorer=filters["scorer"],
                con=con,
            )

        def link(**changes: Any) -> str:
            merged = {"sort": sort, "order": "desc" if descending else "asc", **filters, "page": page.page, **changes}
            return "?" + urlencode({k: v for k, v in merged.items() if v not in (None, "")})

        # The report holds every category (its JSON gives them all); the page draws the first few.
        shown = dataclasses.replace(report, categories=report.categories[: q.CATEGORIES_SHOWN])
        plots = {
            "category": Markup(category_plot(shown.categories)),
            "latency": Markup(latency_histogram(report.latency.trial_sample_ms)),
            "failures": Markup(failure_plot(report.outcomes)),
        }
        return self.page(
            request,
            "experiment.html",
            report=report,
            sections=sections(shown),
            categories_total=len(report.categories),
            categories_shown=q.CATEGORIES_SHOWN,
            plots=plots,
            cases=page,
            filters=filters,
            sort=sort,
            descending=descending,
            link=link,
            outcomes=[*q.OUTCOMES, *report.outcomes.failures_by_type],
            refresh=REFRESH_SECONDS if report.experiment.status == "running" else None,
        )

    def trial(self, request: Request) -> Response:
        eid, tid = request.path_params["experiment_id"], request.path_params["trial_id"]
        view = q.trial(self.store, eid, tid)
        if view is None:
            return self.not_found(request, f"no trial {tid!r} in experiment {eid!r}")
        return self.page(request, "trial.html", eid=eid, view=view, verdicts=review.VERDICTS)

    def compare(self, request: Request) -> Response:
        a, b = request.path_params["baseline"], request.path_params["candidate"]
        for eid in (a, b):
            try:
                missing = find(self.store, eid) is None
            except ValueError:  # a prefix of several experiments: the gate's refusal says so
                missing = False
            if missing:  # like every page of an experiment that is not there, rather than a refused comparison
                return self.not_found(request, f"no experiment {eid!r} in this store")
        decision = gate(self.store, a, b)
        c = decision.comparison
        shown = c.to_dict() if c else None
        return self.page(
            request,
            "compare.html",
            a=a,
            b=b,
            decision=decision,
            c=c,
            figure_header=DIFFERENCE_HEADER,
            figure_rows=figure_rows(shown) if shown else [],
            figures_note=figures_note(shown) if shown else "",
            moved_shown=MOVED_SHOWN,
            categories_shown=q.CATEGORIES_SHOWN,
        )

    def case_pair(self, request: Request) -> Response:
        a, b, case_id = (request.path_params[k] for k in ("baseline", "candidate", "case_id"))
        sides = [(a, q.case_trials(self.store, a, case_id)), (b, q.case_trials(self.store, b, case_id))]
        if not any(trials for _, trials in sides):
            return self.not_found(request, f"no trials of case {case_id!r} in {a} or {b}")
        return self.page(request, "case_pair.html", a=a, b=b, case_id=case_id, sides=sides)

    def sql(self, request: Request) -> Response:
        sql = request.query_params.get("q", "")
        result, error, status, headers = None, None, 200, {}
        if sql.strip():
            try:
                result = self.workers.page(sql, self.sql_seconds)
            except WorkersBusy as exc:
                error, status, headers = str(exc), 503, RETRY_AFTER
            except AgentevalError as exc:
                error = str(exc).splitlines()[0]
        example = "SELECT outcome, count(*) AS trials FROM trials GROUP BY outcome"
        page = self.page(
            request,
            "sql.html",
            status,
            sql=sql,
            result=result,
            error=error,
            example=example,
            limits={"rows": sql_page.SQL_ROWS_SHOWN, "cell": sql_page.SQL_CELL_CHARS, "page": sql_page.SQL_PAGE_CHARS},
        )
        page.headers.update(headers)
        return page

    def sql_download(self, request: Request) -> Response:
        """The SQL page's result as a file (``/sql.csv``, ``/sql.json``): every row, every value whole, in the
        formats of ``agenteval sql --format csv|json``, sent as it is read (see :mod:`._sql_download`). A file,
        not a page: nothing in it is escaped."""
        fmt = request.path_params["fmt"]
        if fmt not in MEDIA_TYPES:
            return self.not_found(request, f"no download as {fmt!r}: /sql.csv or /sql.json")
        sql = request.query_params.get("q", "")
        if not sql.strip():
            return PlainTextResponse("give the statement as ?q=", status_code=400)
        try:
            pieces = self.workers.download(sql, fmt, self.sql_seconds)
        except WorkersBusy as exc:
            return PlainTextResponse(str(exc), status_code=503, headers=RETRY_AFTER)
        except AgentevalError as exc:
            return PlainTextResponse(str(exc).splitlines()[0], status_code=400)
        return ResultFile(
            pieces,
            self.sql_seconds,
            media_type=MEDIA_TYPES[fmt],
            headers={"Content-Disposition": f'attachment; filename="result.{fmt}"'},
        )

    # --- review --------------------------------------------------------------------------------

    def review(self, request: Request) -> Response:
        eid = request.query_params.get("experiment") or None
        shown, total = review.newest_reviews(self.store, eid)
        return self.page(
            request,
            "review.html",
            reviews=shown,
            total=total,
            experiment=eid,
            case_files=list(enumerate(self.case_files)),
        )

    async def record(self, request: Request) -> Response:
        form = request.state.form  # read and checked by the guard (_security.Guard)
        field = {key: str(form.get(key) or "") for key in ("experiment_id", "trial_id", "verdict", "note", "reviewer")}
        try:
            await run_in_threadpool(
                review.record_verdict,
                self.store,
                field["experiment_id"],
                field["trial_id"],
                field["verdict"],
                field["note"],
                field["reviewer"],
            )
        except review.ReviewError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        return RedirectResponse(same_site_path(str(form.get("next") or "/review")), status_code=303)

    def labels(self, request: Request) -> Response:
        eid = request.query_params.get("experiment") or None
        return PlainTextResponse(
            review.labels_jsonl(self.store, eid),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": 'attachment; filename="labels.jsonl"'},
        )

    def _case_file(self, request: Request) -> CaseFile | None:
        index = _int(request.path_params.get("index"), -1)
        return self.case_files[index] if 0 <= index < len(self.case_files) else None

    def unreadable(self, request: Request, error: AgentevalError) -> HTMLResponse:
        """A case file under review that cannot be read now (edited into a bad line, moved or deleted since the
        start): a 409 that says which and why, rather than a 500."""
        message = f"{error}; fix the file and reload"
        return self.page(request, "error.html", 409, title="The case file cannot be read", message=message)

    def case_file(self, request: Request) -> Response:
        found = self._case_file(request)
        if found is None:
            return self.not_found(request, "no such case file: start the dashboard with --review-cases FILE")
        try:
            cases = found.cases()
        except AgentevalError as exc:
            return self.unreadable(request, exc)
        return self.page(
            request,
            "case_file.html",
            index=request.path_params["index"],
            path=str(found.path),
            cases=cases,
            decisions=found.decisions(),
        )

    async def decide(self, request: Request) -> Response:
        found = self._case_file(request)
        if found is None:
            return PlainTextResponse("no such case file", status_code=404)
        form = request.state.form  # read and checked by the guard (_security.Guard)
        try:
            found.decide(
                str(form.get("case_id") or ""),
                str(form.get("decision") or ""),
                str(form.get("note") or ""),
                str(form.get("reviewer") or ""),
            )
        except review.ReviewError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        except AgentevalError as exc:  # the file cannot be read now
            return self.unreadable(request, exc)
        return RedirectResponse(f"/review/cases/{request.path_params['index']}", status_code=303)

    def accepted(self, request: Request) -> Response:
        found = self._case_file(request)
        if found is None:
            return PlainTextResponse("no such case file", status_code=404)
        try:
            accepted = found.accepted_jsonl()
        except AgentevalError as exc:
            return self.unreadable(request, exc)
        return PlainTextResponse(
            accepted,
            media_type="application/x-ndjson",
            headers={"Content-Disposition": 'attachment; filename="accepted.jsonl"'},
        )


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def create_app(
    store: Store,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    case_files: list[Path] | None = None,
    sql_seconds: float = sql_page.SQL_SECONDS,
    sql_memory: int = SERVER_MEMORY_LIMIT,
    sql_workers: int = SERVER_STATEMENTS,
) -> Starlette:
    """The dashboard as an ASGI app serving ``store`` on ``host`` (needed to check the ``Host`` and ``Origin`` of
    requests); ``token``: what every request must present (required off loopback); ``sql_seconds``: how long a
    statement of the SQL page may run; ``sql_memory``: the bytes it may use (each runs in a worker process capped
    at that, see :mod:`._sql_pool`); ``sql_workers``: how many statements may run at once."""
    store.require()
    for path in case_files or []:
        CaseFile(Path(path)).cases()  # a bad file is an error at start, not on the page
    pages = Dashboard(store, list(case_files or []), sql_seconds, sql_memory, sql_workers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        pages.workers.start()  # ready before the first statement, rather than started by it
        try:
            yield
        finally:
            pages.workers.close()

    routes = [
        Route("/", pages.experiments),
        Route("/pick", pages.pick),
        Route("/experiments/{experiment_id}", pages.experiment),
        Route("/experiments/{experiment_id}/trials/{trial_id}", pages.trial),
        Route("/compare/{baseline}/{candidate}", pages.compare),
        Route("/compare/{baseline}/{candidate}/cases/{case_id:path}", pages.case_pair),
        Route("/sql", pages.sql),
        Route("/sql.{fmt}", pages.sql_download),
        Route("/review", pages.review),
        Route("/review", pages.record, methods=["POST"]),
        Route("/review/labels.jsonl", pages.labels),
        Route("/review/cases/{index:int}", pages.case_file),
        Route("/review/cases/{index:int}", pages.decide, methods=["POST"]),
        Route("/review/cases/{index:int}/accepted.jsonl", pages.accepted),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Guard, host=host, token=token)], lifespan=lifespan)
