"""The ``agenteval`` command: a thin layer over the Python API."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agenteval")
def main() -> None:
    """Trace and evaluate AI agents with OpenTelemetry."""


@main.command()
@click.argument("questions", nargs=-1)
def demo(questions: tuple[str, ...]) -> None:
    """Run a small decorated agent and show the spans it records."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from rich.console import Console
    from rich.text import Text
    from rich.tree import Tree

    from agenteval.demo import demo_agent

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace.set_tracer_provider(provider)
    console = Console()
    for question in questions or ("What is 6 * 7?", "What is 1250 / 4?"):
        try:
            answer = demo_agent(question)
        except ValueError as exc:  # recorded on the spans as an error; shown, not raised
            answer = f"error: {exc}"
        console.print(Text(question, style="bold").append(f" -> {answer}", style="default"))
    spans = memory.get_finished_spans()
    children: dict[int | None, list] = {}
    for span in spans:
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def add(tree: Tree, span: ReadableSpan) -> None:
        ms = (span.end_time - span.start_time) / 1e6
        keys = [k for k in span.attributes if k.startswith(("gen_ai.usage", "gen_ai.tool.call"))]
        detail = ", ".join(f"{k}={span.attributes[k]}" for k in keys)
        # Attribute values are untrusted text: build a Text, never parse them as markup.
        node = tree.add(Text(span.name).append(f"  {ms:.2f} ms  {detail}", style="dim"))
        for child in sorted(children.get(span.context.span_id, []), key=lambda s: s.start_time):
            add(node, child)

    root = Tree("spans")
    for span in sorted(children.get(None, []), key=lambda s: s.start_time):
        add(root, span)
    console.print(root)
