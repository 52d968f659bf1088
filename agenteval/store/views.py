"""The path the store's SQL views had before the store's modules became private; kept so code written against
it keeps working (an earlier README pointed at ``agenteval.store.views.judged_trials``)."""

from ._views import CURRENT_VIEWS, current_scores, current_trials, judged_trials, latest_experiments

__all__ = ["CURRENT_VIEWS", "current_scores", "current_trials", "judged_trials", "latest_experiments"]
