"""Model prices: a table shipped with the package, overridable by a file; stored with each experiment."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UsageError

Prices = dict[str, dict[str, float]]
"""model -> {"input": USD per million tokens, "output": USD per million tokens}"""


def load_prices(override: str | Path | None = None) -> Prices:
    """The shipped table, with a JSON file's entries (same shape) laid over it."""
    table: Prices = json.loads(resources.files("agenteval").joinpath("prices.json").read_text())["models"]
    if override is not None:
        try:
            data: Any = json.loads(Path(override).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"--prices {override}: {exc}") from exc
        models = data.get("models", data) if isinstance(data, dict) else None
        if not isinstance(models, dict):
            raise UsageError(f'--prices {override}: expected {{"models": {{"name": {{"input": .., "output": ..}}}}}}')
        for model, price in models.items():
            if not (isinstance(price, dict) and {"input", "output"} <= set(price)):
                raise UsageError(f"--prices {override}: {model!r} needs input and output prices per million tokens")
            table[model] = {"input": float(price["input"]), "output": float(price["output"])}
    return table


def price_for(prices: Prices, model: str | None) -> dict[str, float] | None:
    """The price of ``model``, also for dated versions (``gpt-4o-2024-08-06`` -> ``gpt-4o``)."""
    if not model:
        return None
    if model in prices:
        return prices[model]
    candidates = [name for name in prices if model.startswith(name + "-")]
    return prices[max(candidates, key=len)] if candidates else None


def cost(prices: Prices, model: str | None, input_tokens: int | None, output_tokens: int | None) -> float | None:
    """US dollars for one model call, or None when the model has no price."""
    price = price_for(prices, model)
    if price is None:
        return None
    return ((input_tokens or 0) * price["input"] + (output_tokens or 0) * price["output"]) / 1e6
