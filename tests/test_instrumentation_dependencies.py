"""The instrumentation distribution needs opentelemetry-api and nothing else."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap

BLOCKER = """
import importlib.abc, sys

class Blocker(importlib.abc.MetaPathFinder):
    blocked = ("opentelemetry.sdk", "duckdb", "pyarrow", "numpy", "click", "agenteval_exporters")

    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in self.blocked):
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, Blocker())
"""


def run_isolated(body: str) -> str:
    script = BLOCKER + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_declared_dependencies_are_the_api_only():
    requirements = importlib.metadata.requires("agenteval-instrumentation")
    assert [r.split(">")[0].split("<")[0].split("=")[0] for r in requirements] == ["opentelemetry-api"]


def test_records_spans_through_any_api_provider_without_the_sdk():
    # A TracerProvider written against the API alone stands in for "some other SDK";
    # the decorators must work with it, and none of the blocked packages may be imported.
    out = run_isolated(
        """
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
        import itertools

        ids = itertools.count(1)
        recorded = []

        class Span(NonRecordingSpan):
            def __init__(self, name, parent):
                super().__init__(SpanContext(1, next(ids), False, TraceFlags(1)))
                self.name, self.parent, self.attrs = name, parent, {}
            def is_recording(self): return True
            def set_attributes(self, attributes): self.attrs.update(attributes)
            def set_attribute(self, key, value): self.attrs[key] = value
            def end(self, end_time=None): recorded.append(self)

        class Tracer(trace.Tracer):
            def start_span(self, name, context=None, kind=None, **kw):
                parent = trace.get_current_span(context).get_span_context().span_id
                return Span(name, parent)
            def start_as_current_span(self, name, *a, **kw):
                return trace.use_span(self.start_span(name), end_on_exit=True)

        class Provider(trace.TracerProvider):
            def get_tracer(self, *a, **kw): return Tracer()

        trace.set_tracer_provider(Provider())

        from agenteval_instrumentation import agent, tool

        @tool
        def add(a, b): return a + b

        @agent
        def run(): return add(1, 2)

        assert run() == 3
        tool_span, agent_span = recorded
        assert tool_span.name == "execute_tool add" and agent_span.name == "invoke_agent run"
        assert tool_span.parent == agent_span.get_span_context().span_id
        assert tool_span.attrs["gen_ai.tool.call.result"] == "3"
        import sys
        leaked = [m for m in sys.modules if m.split(".")[0] in ("duckdb", "pyarrow", "numpy", "click")]
        print("ok", leaked, "opentelemetry.sdk" in sys.modules)
        """
    )
    assert out.strip() == "ok [] False"


def test_with_no_provider_calls_run_untouched_and_capture_nothing():
    out = run_isolated(
        """
        from agenteval_instrumentation import configure_capture, tool
        calls = []
        configure_capture(redactor=lambda attribute, value: calls.append(attribute) or value)

        @tool
        def add(a, b): return a + b

        assert add(2, 3) == 5
        print("redactor calls:", len(calls))
        """
    )
    assert out.strip() == "redactor calls: 0"


def test_with_no_provider_an_async_generator_still_gets_what_its_consumer_sends_and_throws():
    # Without a provider the async generator wrapper used ``async for``: asend() values became None, athrow()
    # and aclose() stopped at the wrapper and never reached the decorated generator (its handlers and its
    # ``finally`` did not run then). A decorated generator must behave as the undecorated one.
    out = run_isolated(
        """
        import asyncio
        from agenteval_instrumentation import tool

        seen = []

        @tool
        async def chat():
            try:
                question = yield "ready"
                seen.append(question)
                try:
                    yield "answer"
                except ValueError as exc:
                    seen.append(f"caught {exc}")
                    yield "recovered"
                yield "more"
            finally:
                seen.append("finally")

        async def main():
            stream = chat()
            assert await stream.asend(None) == "ready"
            assert await stream.asend("why?") == "answer"
            assert await stream.athrow(ValueError("stop")) == "recovered"
            await stream.aclose()
            seen.append("closed")

        asyncio.run(main())
        print(seen)
        """
    )
    assert out.strip() == "['why?', 'caught stop', 'finally', 'closed']"


def test_decorating_loads_nothing_until_the_first_call_and_then_records_every_kind():
    # An app that imports decorated code without calling it (a command's --help) pays for neither the
    # OpenTelemetry API nor the recording code; a provider installed after decorating still gets the spans.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
            import sys
            from agenteval_instrumentation import agent, llm_call, retriever, tool

            @tool
            def add(a, b): return a + b
            @llm_call(model="m")
            async def ask(prompt): return "yes"
            @agent
            def steps(n): yield from range(n)
            @retriever
            async def find(query):
                yield "doc-1"
            class Box:
                @tool
                def size(self): return 3

            heavy = ("opentelemetry", "inspect", "logging", "json", "dataclasses")
            print("after decorating:", sorted({m.split(".")[0] for m in sys.modules} & set(heavy)))

            import asyncio
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)

            async def found(): return [d async for d in find("q")]
            assert add(1, 2) == 3 and asyncio.run(ask("?")) == "yes" and list(steps(2)) == [0, 1]
            assert asyncio.run(found()) == ["doc-1"] and Box().size() == 3
            print(sorted(s.name for s in exporter.get_finished_spans()))
            """
            ),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "after decorating: []",
        "['chat m', 'execute_tool add', 'execute_tool size', 'invoke_agent steps', 'retrieval find']",
    ]
