"""The tools the built-in datasets need: deterministic, offline, decorated with ``@tool``."""

from collections.abc import Callable
from typing import Any

from ._calculator import CalculatorError, calculator
from ._countries import COUNTRIES, MISSING_COUNTRY, country_facts, lookup
from ._currency import RATES_AS_OF, USD_PER_UNIT, UnknownCurrency, convert, convert_currency
from ._faulty import INJECTION_PAYLOAD, REVIEWS, ServiceUnavailable, fetch_review, get_stock_price
from ._schema import tool_schema
from ._search import Corpus, corpus, read_corpus, retrieve, search_documents, search_tool

BUILTIN_TOOLS: dict[str, Callable[..., Any]] = {
    "calculator": calculator,
    "convert_currency": convert_currency,
    "country_facts": country_facts,
    "get_stock_price": get_stock_price,
    "fetch_review": fetch_review,
    "search_documents": search_documents,
}
"""The built-in tools by the name a dataset's ``expected_tools`` uses."""


def tool_schemas(names: list[str] | None = None) -> list[dict[str, Any]]:
    """JSON-schema descriptions of the built-in tools (all, or those named)."""
    return [tool_schema(BUILTIN_TOOLS[n], n) for n in (names or list(BUILTIN_TOOLS))]


__all__ = [
    "BUILTIN_TOOLS",
    "COUNTRIES",
    "INJECTION_PAYLOAD",
    "MISSING_COUNTRY",
    "RATES_AS_OF",
    "REVIEWS",
    "USD_PER_UNIT",
    "CalculatorError",
    "Corpus",
    "ServiceUnavailable",
    "UnknownCurrency",
    "calculator",
    "convert",
    "convert_currency",
    "corpus",
    "country_facts",
    "fetch_review",
    "get_stock_price",
    "lookup",
    "read_corpus",
    "retrieve",
    "search_documents",
    "search_tool",
    "tool_schema",
    "tool_schemas",
]
