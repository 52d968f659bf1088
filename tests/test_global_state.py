"""State agenteval keeps for a process is keyed by the objects it belongs to, so a new object never
inherits an old one's: a collector or a tracing set-up kept under id(provider) would be handed to a later
provider given the same id, and that provider's spans would never be collected."""

from __future__ import annotations

import gc

from opentelemetry.sdk.trace import TracerProvider

from agenteval.run._collect import TrialTag, collector_for, current_trial, trial_context


def test_each_provider_s_trial_spans_reach_its_own_collector_when_providers_come_and_go():
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
        gc.collect()
    assert lost == 0, f"{lost} of 200 providers' trial spans never reached their collector"
