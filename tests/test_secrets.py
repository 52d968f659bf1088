"""An API key never reaches the store, the logs or the stored options and environment: a run with a recognisable
fake key through every model role (agent, judge, simulated user, the cache), then every column of every table
of the store, every other file in it, and everything the command printed are scanned for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import model_servers as ms
import pyarrow.parquet as pq

KEY = "sk-test-RECOGNISABLE-9f3c2a7e1b4d5c6a8e0f"
ANTHROPIC_KEY = "sk-ant-test-RECOGNISABLE-7d1e5b3a9c2f4e6a"


def respond(request):
    system = request.system_text()
    if "You grade an AI assistant" in system:
        return ms.tool_call("grade", {"score": 1, "passed": True, "reasoning": "fine"})
    if "You play a user" in system:
        return ms.text("[DONE]")
    if "fail" in request.last_user_text():
        return ms.Reply(status=401, error={"kind": "server"})  # an auth-style failure, recorded on its span
    return ms.text("4")


def test_no_api_key_in_any_table_file_or_output(model_server, tmp_path):
    model_server.responder = respond
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        "\n".join(
            json.dumps(c)
            for c in [
                {"id": "a", "input": "What is 2 + 2?", "expected_output": "4"},
                {"id": "b", "input": "Please fail", "expected_output": "4"},
                {"id": "c", "input": "Hi", "expected_output": "", "simulated_user": "A user.", "max_turns": 2},
            ]
        )
    )
    store = tmp_path / "store"
    env = {
        "PATH": "/usr/bin:/bin",
        "OPENAI_API_KEY": KEY,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "OPENAI_BASE_URL": model_server.openai_url,
        "ANTHROPIC_BASE_URL": model_server.anthropic_url,
        "AGENTEVAL_STORE": str(store),
        "PYTHONPATH": ":".join(sys.path),  # this tree's three distributions, whatever the interpreter has installed
    }
    command = [
        sys.executable,
        "-m",
        "agenteval.cli",
        "run",
        "--model",
        "openai/agent",
        "--dataset",
        str(cases),
        "--judge",
        "anthropic/judge",
        "--simulate-users",
        "openai/user",
        "--cache",
        "--attempts",
        "2",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    report = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "report", "--format", "json"], capture_output=True, text=True, env=env
    )
    assert {r.headers.get("authorization") for r in model_server.requests if r.api == "openai"} == {f"Bearer {KEY}"}
    anthropic_sent = [
        r.headers.get("x-api-key") or r.headers.get("authorization")
        for r in model_server.requests
        if r.api == "anthropic"
    ]
    assert anthropic_sent and all(ANTHROPIC_KEY in sent for sent in anthropic_sent)  # the keys were in use
    files = [p for p in store.rglob("*") if p.is_file()]
    tables = [p for p in files if p.suffix == ".parquet"]
    assert {p.relative_to(store).parts[0] for p in tables} >= {"experiments", "cases", "trials", "spans", "scores"}
    for path in tables:
        table = pq.read_table(path)
        for name in table.column_names:
            text = json.dumps(table.column(name).to_pylist(), default=str)
            assert KEY not in text and ANTHROPIC_KEY not in text, f"{path.relative_to(store)}: column {name}"
    others = [p for p in files if p.suffix != ".parquet"]
    assert any(".model-cache" in p.parts for p in others)  # the cache was written, and is scanned too
    for path in others:
        content = Path(path).read_bytes()
        assert KEY.encode() not in content and ANTHROPIC_KEY.encode() not in content, path
    for output in (done.stdout, done.stderr, report.stdout, report.stderr):
        assert KEY not in output and ANTHROPIC_KEY not in output


def test_a_key_that_a_gateway_quotes_back_in_its_error_is_masked_everywhere(model_server, monkeypatch):
    """A key of no known shape (a gateway's own), which the masking of secret-looking text cannot recognise, quoted
    back by the server that refused it: neither the trial's error nor the span's nor the run's output has it."""
    from agenteval import evaluate
    from agenteval.dataset._cases import Case, Dataset
    from agenteval.store import Store

    key = "team-blue-7F3A9C2E51D04B86"

    def refuse(request):
        sent = request.headers.get("authorization", "").removeprefix("Bearer ")
        error = {"error": {"message": f"Invalid key '{sent}'", "type": "invalid_request_error", "code": "invalid_key"}}
        return ms.Reply(status=401, body=json.dumps(error))

    monkeypatch.setenv("OPENAI_API_KEY", key)
    model_server.responder = refuse
    dataset = Dataset("d", "d", "h", [Case(id="a", input="What is 2 + 2?", expected_output="4")])
    experiment = evaluate("", dataset, model="openai/m", base_url=model_server.openai_url, progress="none", attempts=1)
    assert model_server.requests and all(key in r.headers.get("authorization", "") for r in model_server.requests)
    (trial,) = Store().rows(
        "SELECT failure_type, error_message FROM trials WHERE experiment_id = ?", [experiment.experiment_id]
    )
    assert trial["failure_type"] == "llm_error" and "Invalid key '***'" in trial["error_message"]
    store = Path(Store().root)
    for path in store.rglob("*.parquet"):
        table = pq.read_table(path)
        for name in table.column_names:
            assert key not in json.dumps(table.column(name).to_pylist(), default=str), f"{path}: column {name}"


AGENT_WITH_A_KEY = """
import os, signal
from pathlib import Path


def make(api_key: str = "", endpoint: str = ""):
    def answer(question):
        marker = Path(os.environ["KILL_MARKER"])
        if not marker.exists():  # the first run dies at its first trial, so that it can be resumed
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return "4" if api_key == os.environ["EXPECTED_KEY"] else f"wrong key {api_key!r}"
    return answer
"""


def test_a_key_given_as_an_agent_option_is_used_not_stored_and_asked_for_again_on_resume(tmp_path):
    # The experiment's options kept --agent-option values as typed: the key, and the password in a URL.
    key, password = "team-blue-PLANTED-7F3A9C2E", "pw-PLANTED-51D04B86"
    (tmp_path / "agent.py").write_text(AGENT_WITH_A_KEY)
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": "a", "input": "What is 2 + 2?", "expected_output": "4"}) + "\n")
    store = tmp_path / "store"
    env = {
        "PATH": "/usr/bin:/bin",
        "AGENTEVAL_STORE": str(store),
        "KILL_MARKER": str(tmp_path / "killed"),
        "EXPECTED_KEY": key,
        "PYTHONPATH": ":".join(sys.path),
    }
    secret_options = ["--agent-option", f"api_key={key}", "--agent-option", f"endpoint=https://bob:{password}@gw/v1"]

    def run(*args):
        command = [sys.executable, "-m", "agenteval.cli", "run", "--attempts", "1", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)

    killed = run("-d", str(cases), "--agent", "agent.py:make", *secret_options)
    assert killed.returncode == -9
    refused = run("--resume")
    assert refused.returncode != 0 and "agent options api_key, endpoint hold secrets" in refused.stderr
    resumed = run("--resume", *secret_options)
    assert resumed.returncode == 0, resumed.stderr
    report = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "report", "--format", "json"], capture_output=True, text=True, env=env
    )
    from agenteval.store import Store

    # The agent was built with the key given again, not with the stored mask.
    assert Store(store).rows("SELECT reply, passed FROM trials") == [{"reply": "4", "passed": True}]
    for path in store.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert key.encode() not in content and password.encode() not in content, path.relative_to(store)
    for output in (killed, refused, resumed, report):
        assert key not in output.stdout + output.stderr and password not in output.stdout + output.stderr


def test_agent_options_named_key_token_secret_or_password_are_used_not_stored(tmp_path):
    """An agent option named just ``key`` (``--agent-option key=...``, ``{"key": ...}``) was stored as given in the
    experiment's options: ``key`` names a secret only as a URL's query parameter."""
    from agenteval.run import evaluate
    from agenteval.store import Store

    planted = {name: f"{name}-PLANTED-{n}0A1B2C" for n, name in enumerate(("key", "token", "secret", "password"))}
    nested = "nested-PLANTED-3D4E5F"

    def make(key="", token="", secret="", password="", service=None):
        def answer(question):
            return "4" if (key, service["Key"]) == (planted["key"], nested) else "wrong key"

        return answer

    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": "a", "input": "What is 2 + 2?", "expected_output": "4"}) + "\n")
    options = {**planted, "service": {"Key": nested, "region": "eu-west-1"}}
    experiment = evaluate(make, cases, attempts=1, store=tmp_path / "store", progress="none", agent_options=options)
    store = Store(tmp_path / "store")
    assert store.rows("SELECT passed FROM trials") == [{"passed": True}]  # built with the keys given
    (row,) = store.rows("SELECT options FROM experiments WHERE experiment_id = ?", [experiment.id])
    recorded = row["options"] if isinstance(row["options"], dict) else json.loads(row["options"])
    assert recorded["agent_options"] == {
        "key": "***",
        "token": "***",
        "secret": "***",
        "password": "***",
        "service": {"Key": "***", "region": "eu-west-1"},
    }
    for path in (tmp_path / "store").rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            for secret in (*planted.values(), nested):
                assert secret.encode() not in content, path


def test_a_key_in_the_otlp_endpoint_is_masked_in_what_the_run_prints(model_server, tmp_path):
    """The OTLP exporter's warnings quote its HTTP client's error, which names the endpoint with its query: a run
    sending its spans to an endpoint that takes its key as ``?api-key=`` printed the key on stderr at each retry."""
    key = "otlp-PLANTED-4E2B9D71C0"
    model_server.responder = respond
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": "a", "input": "What is 2 + 2?", "expected_output": "4"}) + "\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": model_server.openai_url,
        "AGENTEVAL_STORE": str(tmp_path / "store"),
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{ms.refused_port()}/v1/traces?api-key={key}",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "3",  # one retry: its warning names the endpoint
        "PYTHONPATH": ":".join(sys.path),
    }
    command = [sys.executable, "-m", "agenteval.cli", "run", "--model", "openai/agent", "-d", str(cases)]
    done = subprocess.run([*command, "--attempts", "1"], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    assert "/v1/traces?api-key=***" in done.stderr  # the exporter's warning is there (its wording is the SDK's)
    assert key not in done.stdout + done.stderr


def test_a_key_in_a_request_to_collect_is_masked_in_its_log(tmp_path, caplog):
    """collect logs each request line at debug level: a client giving its key in the URL's query had it logged."""
    import http.client
    import logging

    from collect_clients import json_request

    from agenteval.collect import Collector

    key = "collect-PLANTED-8A7C3E19"
    caplog.set_level(logging.DEBUG, logger="agenteval.collect")
    with Collector(tmp_path / "collected", port=0, grpc_port=0) as collector:
        connection = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=30)
        body = json_request([])
        connection.request("POST", f"/v1/traces?api-key={key}", body, {"Content-Type": "application/json"})
        assert connection.getresponse().status == 200
        connection.close()
    assert "POST /v1/traces?api-key=*** HTTP/1.1" in caplog.text
    assert key not in caplog.text


def test_an_exporter_error_quoting_its_url_is_masked_in_the_runs_log(caplog):
    """An exporter that raises has its traceback logged: the error named the endpoint with its password and key."""
    from opentelemetry.sdk.trace.export import SpanExporter

    from agenteval.run._export import OTLPForwarder

    password, key = "pw-PLANTED-3C9E", "qk-PLANTED-71AB"

    class Unreachable(SpanExporter):
        def export(self, spans):
            raise ConnectionError(f"POST https://bob:{password}@collector.example/v1/traces?api-key={key} failed")

    forwarder = OTLPForwarder(Unreachable())
    forwarder.send(["a span"])
    assert forwarder.close().failed == 1
    assert "the OTLP exporter raised" in caplog.text and "https://bob:***@collector.example" in caplog.text
    assert password not in caplog.text and key not in caplog.text


def test_a_password_and_key_in_the_base_url_are_masked_in_the_http_clients_log(model_server, monkeypatch, caplog):
    """The providers' SDKs log each request's URL at INFO (through httpx): an application that shows INFO logs saw
    the base URL's password and its ``?api-key=`` for every model call of a run."""
    import logging

    from agenteval import evaluate
    from agenteval.dataset._cases import Case, Dataset

    password, key = "pw-PLANTED-6D1F0A", "qk-PLANTED-2B8C47"
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    model_server.responder = respond
    caplog.set_level(logging.INFO)
    base_url = model_server.openai_url.replace("http://", f"http://bob:{password}@") + f"?api-key={key}"
    dataset = Dataset("d", "d", "h", [Case(id="a", input="What is 2 + 2?", expected_output="4")])
    evaluate("", dataset, model="openai/m", base_url=base_url, progress="none", attempts=1)
    assert model_server.requests and "HTTP Request: POST http://bob:***@127.0.0.1" in caplog.text
    assert password not in caplog.text and key not in caplog.text and KEY not in caplog.text


def test_a_log_record_whose_arguments_do_not_fit_its_format_passes_the_filter_as_it_is():
    # The masking filter formats the message before any handler: a format error raised there, from inside the
    # program's logging call; it stays the handler's to report, as without the filter.
    import logging

    from agenteval_instrumentation.masking import SecretMaskingFilter

    record = logging.LogRecord("agenteval", logging.WARNING, __file__, 1, "%d exports", ("not a number",), None)
    assert SecretMaskingFilter().filter(record) is True
    assert (record.msg, record.args) == ("%d exports", ("not a number",))
    record = logging.LogRecord("agenteval", logging.WARNING, __file__, 1, "token=%s", ("tok-PLANTED-55E1",), None)
    assert SecretMaskingFilter().filter(record) is True and record.getMessage() == "token=***"


AGENT_THAT_LOGS = """
import logging
import warnings

from rich.logging import RichHandler

logging.basicConfig(format="agent log: %(name)s %(message)s")  # a handler of the agent's own, on the root logger
# One that renders the exception object itself, its locals too.
logging.getLogger("agent.rich").addHandler(RichHandler(rich_tracebacks=True, tracebacks_show_locals=True))


def answer(question):
    try:
        raise ConnectionError("POST https://gw.example/v1/chat?api-key={key} failed; Authorization: Bearer {token}")
    except ConnectionError:
        logging.getLogger("openai._base_client").exception("request failed")  # a child: no parent's filter sees it
        logging.getLogger("agent.rich").exception("rich: request failed")
    logging.getLogger("urllib3.connectionpool").warning("Retrying: /v1/models?key=%s", "{key}")
    logging.getLogger().warning("a stack", stack_info=True, extra={{"url": "?key={key}"}})  # quoting this line
    warnings.warn("endpoint https://bob:{password}@gw.example/v1 is deprecated")
    raise ValueError("refused https://gw.example/v1?key={key}&client_secret={password}")
"""


def test_what_other_libraries_and_the_agent_log_during_a_run_is_masked_on_stderr(tmp_path):
    """Only agenteval's own loggers, httpx's and the OTLP exporter's were masked: a record of any other logger (an
    SDK's child logger, urllib3's, the agent's own, through a handler the agent installed) reached the run's stderr
    as it was written, with the traceback of the exception it logged, and ``?key=`` was nobody's secret."""
    key, token, password = "qk-PLANTED-5A1E90", "tok9PLANTED7C2D41", "pw-PLANTED-0B8E"
    (tmp_path / "agent.py").write_text(AGENT_THAT_LOGS.format(key=key, token=token, password=password))
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": "a", "input": "What is 2 + 2?", "expected_output": "4"}) + "\n")
    store = tmp_path / "store"
    env = {"PATH": "/usr/bin:/bin", "AGENTEVAL_STORE": str(store), "PYTHONPATH": ":".join(sys.path)}
    command = [
        sys.executable,
        "-m",
        "agenteval.cli",
        "run",
        "--agent",
        "agent.py:answer",
        "-d",
        str(cases),
        "--attempts",
        "1",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = done.stdout + done.stderr
    assert "ConnectionError: POST https://gw.example/v1/chat?api-key=*** failed; Authorization: Bearer ***" in shown
    assert "rich: request failed" in shown
    assert "agent log: urllib3.connectionpool Retrying: /v1/models?key=***" in shown
    assert "warning: endpoint https://bob:***@gw.example/v1 is deprecated" in shown
    for secret in (key, token, password):
        assert secret not in shown
        for path in store.rglob("*"):
            assert not path.is_file() or secret.encode() not in path.read_bytes(), path.relative_to(store)


def test_a_statement_error_quoting_a_secret_is_masked_and_logging_is_left_as_it_was(tmp_path):
    """`agenteval sql` showed DuckDB's error as it came, and it quotes the statement: a SAS URL's signature or a
    token in a literal went to stderr, which CI keeps. The command masks the records of every logger while it runs,
    and leaves the process's logging as it found it: agenteval used as a library changes no one's logging."""
    import logging

    from click.testing import CliRunner

    from agenteval.cli import main
    from agenteval.run import evaluate

    store = tmp_path / "store"
    evaluate("mock", "arithmetic", cases=1, attempts=1, store=store, progress="none")
    factory = logging.getLogRecordFactory()
    statements = {
        "SELECT * FROM read_csv('https://acct.blob.core.windows.net/c/x.csv?sv=2022&sig=PLANTEDsas0A1')": "sig=***",
        "SELECT 'token=PLANTEDtok9B2'::INTEGER": "'token=***'",
    }
    for statement, masked in statements.items():
        done = CliRunner().invoke(main, ["sql", statement, "--store", str(store)])
        assert done.exit_code == 1 and masked in done.output and "PLANTED" not in done.output, done.output
    assert logging.getLogRecordFactory() is factory


def test_other_instrumentations_spans_and_the_resource_are_masked_when_the_exporter_writes_them(tmp_path):
    """collect masked the spans of other instrumentations on intake, but the exporter wrote them as made: an agent
    whose HTTP client is instrumented stored its URL's ``?api-key=``, its Authorization header and its error in a
    run's spans, and every span stored the resource's ``deployment.token`` (OTEL_RESOURCE_ATTRIBUTES)."""
    import duckdb
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    from agenteval_exporters import ParquetSpanExporter

    key, token, resource_token = "qk-PLANTED-E41A", "tok-PLANTED-9C0F3B", "res-PLANTED-77D2"
    provider = TracerProvider(resource=Resource.create({"service.name": "shop", "deployment.token": resource_token}))
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(tmp_path / "store")))
    with provider.get_tracer("opentelemetry.instrumentation.requests").start_as_current_span("GET") as span:
        span.set_attribute("http.url", f"https://gw.example/v1?api-key={key}&page=2")
        span.set_attribute("http.request.header.authorization", (f"Bearer {token}",))
        span.add_event("exception", {"exception.message": f"refused https://gw.example/v1?key={key}"})
        span.set_status(Status(StatusCode.ERROR, f"refused https://gw.example/v1?key={key}"))
    provider.get_tracer("agenteval_instrumentation").start_span("own").end()  # the decorators' scope
    provider.shutdown()
    glob = str(tmp_path / "store" / "spans" / "**" / "*.parquet")
    rows = duckdb.sql(f"SELECT * FROM read_parquet('{glob}') ORDER BY name").to_arrow_table().to_pylist()
    assert [row["name"] for row in rows] == ["GET", "own"]
    get = rows[0]
    assert json.loads(get["attributes"]) == {
        "http.url": "https://gw.example/v1?api-key=***&page=2",
        "http.request.header.authorization": "***",
    }
    assert json.loads(get["events"])[0]["attributes"] == {"exception.message": "refused https://gw.example/v1?key=***"}
    assert get["status_message"] == "refused https://gw.example/v1?key=***"
    for row in rows:
        assert json.loads(row["resource"])["deployment.token"] == "***"
        assert json.loads(row["resource"])["service.name"] == "shop"
    text = json.dumps(rows, default=str)
    assert key not in text and token not in text and resource_token not in text


def test_an_application_that_turns_masking_off_has_other_instrumentations_spans_stored_as_made(tmp_path, monkeypatch):
    import duckdb
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from agenteval_exporters import ParquetSpanExporter
    from agenteval_instrumentation import capture

    monkeypatch.setattr(capture.config, "mask_secrets", False)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(tmp_path / "store")))
    with provider.get_tracer("opentelemetry.instrumentation.requests").start_as_current_span("GET") as span:
        span.set_attribute("http.url", "https://gw.example/v1?api-key=kept-on-purpose")
    provider.shutdown()
    glob = str(tmp_path / "store" / "spans" / "**" / "*.parquet")
    ((attributes,),) = duckdb.sql(f"SELECT attributes FROM read_parquet('{glob}')").fetchall()
    assert json.loads(attributes) == {"http.url": "https://gw.example/v1?api-key=kept-on-purpose"}


AGENT_WITH_A_THREAD = """
import threading


def answer(question):
    def fetch():
        raise ConnectionError("GET https://gw.example/v1?api-key={key} refused")

    worker = threading.Thread(target=fetch, name="fetcher")
    worker.start()
    worker.join()
    return "4"
"""


def test_the_tracebacks_python_prints_under_the_command_are_masked(tmp_path):
    """Python's own tracebacks (an exception a thread of the agent left uncaught, an error shown whole with --debug)
    were printed as they were: the key in the URL the exception named reached stderr."""
    key = "qk-PLANTED-3F6A0D"
    (tmp_path / "agent.py").write_text(AGENT_WITH_A_THREAD.format(key=key))
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": "a", "input": "What is 2 + 2?", "expected_output": "4"}) + "\n")
    env = {"PATH": "/usr/bin:/bin", "AGENTEVAL_STORE": str(tmp_path / "store"), "PYTHONPATH": ":".join(sys.path)}
    agenteval = [sys.executable, "-m", "agenteval.cli"]
    run = [*agenteval, "run", "--agent", "agent.py:answer", "-d", str(cases), "--attempts", "1"]
    threaded = subprocess.run(run, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert threaded.returncode == 0, threaded.stderr
    assert "Exception in thread fetcher:" in threaded.stderr
    assert "ConnectionError: GET https://gw.example/v1?api-key=*** refused" in threaded.stderr
    debugged = subprocess.run(
        [*agenteval, "--debug", "sql", f"SELECT 'token={key}'::INTEGER"], capture_output=True, text=True, env=env
    )
    assert debugged.returncode == 1 and "Traceback (most recent call last)" in debugged.stderr
    assert "Could not convert string 'token=***' to INT32" in debugged.stderr
    for done in (threaded, debugged):
        assert key not in done.stdout + done.stderr
