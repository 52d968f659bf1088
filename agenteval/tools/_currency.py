"""A currency converter over a fixed, dated rate table, so answers can be checked exactly."""

from __future__ import annotations

from typing import Any

from agenteval_instrumentation import tool

RATES_AS_OF = "2025-01-02"
USD_PER_UNIT: dict[str, float] = {
    "USD": 1.0,
    "EUR": 1.087,
    "GBP": 1.27,
    "CHF": 1.10,
    "JPY": 0.0064,
    "CAD": 0.70,
    "AUD": 0.62,
    "CNY": 0.137,
    "INR": 0.012,
    "MXN": 0.049,
    "BRL": 0.16,
    "SEK": 0.091,
    "KRW": 0.00068,
    "ZAR": 0.053,
    "NOK": 0.088,
}
"""What one unit of each currency was worth in US dollars on :data:`RATES_AS_OF`."""


class UnknownCurrency(KeyError):
    """A currency code that is not in the rate table."""


def convert(amount: float, from_currency: str, to_currency: str) -> float:
    """``amount`` in ``from_currency`` expressed in ``to_currency``, rounded to cents."""
    source, target = from_currency.strip().upper(), to_currency.strip().upper()
    for code in (source, target):
        if code not in USD_PER_UNIT:
            raise UnknownCurrency(f"no rate for {code!r}; known: {', '.join(sorted(USD_PER_UNIT))}")
    return round(amount * USD_PER_UNIT[source] / USD_PER_UNIT[target], 2)


@tool
def convert_currency(amount: float, from_currency: str, to_currency: str) -> dict[str, Any]:
    """Convert an amount of money between currencies at the fixed rates of 2025-01-02.

    Args:
        amount: how much money, in from_currency.
        from_currency: ISO 4217 code of the currency to convert from, e.g. EUR.
        to_currency: ISO 4217 code of the currency to convert to, e.g. USD.
    """
    converted = convert(amount, from_currency, to_currency)
    return {"amount": converted, "currency": to_currency.strip().upper(), "rates_as_of": RATES_AS_OF}
