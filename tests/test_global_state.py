"""State agenteval keeps for a process is keyed by the objects it belongs to, so a new object never
inherits an old one's: a collector or a tracing set-up kept under id(provider) would be handed to a later
provider given the same id, and that provider's spans would never be collected."""

from __future__ import annotations

import subprocess
import sys

PROVIDERS_COME_AND_GO = """
import gc

from opentelemetry.sdk.trace import TracerProvider

from agenteval.run._collect import TrialTag, collector_for, current_trial, trial_context

lost = 0
for round_ in range(200):
    provider = TracerProvider(shutdown_on_exit=False)  # nothing else keeps it alive once dropped
    collector = collector_for(provider)
    collector.open("exp")
    token = trial_context(TrialTag("exp", "case", f"trial-{round_}", 1))
    try:
        provider.get_tracer("test").start_span("step").end()
    finally:
        current_trial.reset(token)
    lost += not collector.take("exp", f"trial-{round_}")
    collector.close("exp")
    del provider, collector
    gc.collect()  # so the next provider may be given the same id
print(lost)
"""


def test_each_provider_s_trial_spans_reach_its_own_collector_when_providers_come_and_go():
    # In a fresh process: a full collection there takes about a millisecond, against a quarter of a second in the
    # test process, whose heap holds every module the suite has imported (200 rounds took 49 s).
    done = subprocess.run([sys.executable, "-c", PROVIDERS_COME_AND_GO], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", (
        f"{done.stdout.strip()} of 200 providers' trial spans never reached their collector"
    )


def _agent_folder(root, answer: str):
    """An agent file whose answer comes from a sibling module, as agents split over files do."""
    root.mkdir()
    (root / "helpers.py").write_text(f"ANSWER = {answer!r}\n")
    (root / "my_agent.py").write_text("import helpers\n\n\ndef answer(question):\n    return helpers.ANSWER\n")
    return f"{root / 'my_agent.py'}:answer"


def test_an_agent_file_s_imports_last_as_long_as_its_run(tmp_path):
    import sys

    from agenteval import evaluate

    dataset = tmp_path / "one.jsonl"
    dataset.write_text('{"id": "a", "input": "q?", "expected_output": "first"}\n')
    first = _agent_folder(tmp_path / "first", "first")
    second = _agent_folder(tmp_path / "second", "second")
    before_path = list(sys.path)

    def agent_modules():
        return [name for name, m in sys.modules.items() if str(tmp_path) in str(getattr(m, "__file__", None))]

    one = evaluate(first, dataset, attempts=1, store=tmp_path / "store", progress="none")
    assert sys.path == before_path
    assert agent_modules() == []
    # A sibling of the same name in another folder is that folder's own, not the first run's left behind.
    two = evaluate(second, dataset, attempts=1, store=tmp_path / "store", progress="none")
    assert (one.summary.passed, two.summary.passed) == (1, 0)
    assert sys.path == before_path
    assert agent_modules() == []
