"""Model prices: a table shipped with the package, overridable by a file; stored with each experiment."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

from ..dataset._cases import NotUtf8, utf8_text
from ..dataset._file_kinds import open_regular
from ..errors import UsageError

Prices = dict[str, dict[str, float]]
"""model -> {"input": USD per million tokens, "output": USD per million tokens}"""


def load_prices(override: str | Path | None = None) -> Prices:
    """The shipped table, with a JSON file's entries (same shape) laid over it."""
    table: Prices = json.loads(resources.files("agenteval").joinpath("prices.json").read_text())["models"]
    if override is not None:
        table.update(price_file(override))
    return table


def price_file(path: str | Path) -> Prices:
    """The entries of a ``--prices`` file, checked."""
    try:
        with open_regular(path) as handle:
            data: Any = json.loads(utf8_text(handle.read(), file_start=True).removeprefix("\ufeff"))
    except OSError as exc:  # a device such as /dev/zero was read until memory ran out
        raise UsageError(f"--prices {path}: {exc.strerror or exc}; give a JSON file of prices") from exc
    except (NotUtf8, json.JSONDecodeError) as exc:  # bytes that are not UTF-8 raised from read_text, a traceback
        raise UsageError(f"--prices {path}: {exc}") from exc
    models = data.get("models", data) if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise UsageError(f'--prices {path}: expected {{"models": {{"name": {{"input": .., "output": ..}}}}}}')
    entries: Prices = {}
    for model, price in models.items():
        if not (isinstance(price, dict) and {"input", "output"} <= set(price)):
            raise UsageError(f"--prices {path}: {model!r} needs input and output prices per million tokens")
        entries[model] = {side: _price(path, model, side, price[side]) for side in ("input", "output")}
    return entries


def repriced(recorded: Prices, path: str | Path) -> list[str]:
    """The models a ``--prices`` file given to a resume prices otherwise than the run recorded: the run's trials
    are priced as it recorded, the resumed ones too, so such a file would be ignored."""
    return sorted(model for model, price in price_file(path).items() if recorded.get(model) != price)


def _price(override: str | Path, model: str, side: str, value: Any) -> float:
    """One price as a number of dollars; anything else is refused here, naming it: a NaN printed "cost $nan" and
    made JSON reports invalid, a negative price a negative cost, and null or text raised from ``float``."""
    number = math.nan
    if not isinstance(value, bool):
        try:
            number = float(value)
        except (TypeError, ValueError):
            pass
    if not (math.isfinite(number) and number >= 0):
        raise UsageError(
            f"--prices {override}: {model!r} {side} must be US dollars per million tokens, a number of 0 or more, "
            f"not {value!r}"
        )
    return number


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


def prices_sql(prices: Prices, models: str) -> str:
    """SQL: each model of the relation ``models`` (a ``model`` column) with its ``input`` and ``output`` price per
    million tokens by :func:`price_for`'s rule, in equi-joins: the model's own name, else the longest of its
    ``-``-separated prefixes that has a price. Models without one are left out."""
    if not prices:
        return "SELECT NULL::VARCHAR AS model, NULL::DOUBLE AS input, NULL::DOUBLE AS output WHERE false"
    rows = ", ".join(
        f"('{name.replace(chr(39), chr(39) * 2)}', {float(p['input'])!r}, {float(p['output'])!r})"
        for name, p in prices.items()
    )
    return f"""
SELECT c.model, arg_max(pr.input, length(pr.name)) AS input, arg_max(pr.output, length(pr.name)) AS output
FROM (SELECT model, unnest(list_transform(range(len(string_split(model, '-')), 0, -1),
                                          lambda i: array_to_string(string_split(model, '-')[1:i], '-'))) AS name
      FROM (SELECT DISTINCT model FROM {models} WHERE model IS NOT NULL)) c
JOIN (VALUES {rows}) pr(name, input, output) USING (name)
GROUP BY c.model
"""
