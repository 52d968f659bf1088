"""Country facts: capital, population and currency, from a fixed table that lacks one country on purpose."""

from __future__ import annotations

from typing import Any

from agenteval_instrumentation import tool

COUNTRIES: dict[str, dict[str, Any]] = {
    "Argentina": {"capital": "Buenos Aires", "population": 46_654_581, "currency": "ARS"},
    "Australia": {"capital": "Canberra", "population": 26_638_544, "currency": "AUD"},
    "Brazil": {"capital": "Brasília", "population": 211_140_729, "currency": "BRL"},
    "Canada": {"capital": "Ottawa", "population": 41_288_599, "currency": "CAD"},
    "China": {"capital": "Beijing", "population": 1_408_280_000, "currency": "CNY"},
    "Egypt": {"capital": "Cairo", "population": 107_271_260, "currency": "EGP"},
    "France": {"capital": "Paris", "population": 68_635_943, "currency": "EUR"},
    "Germany": {"capital": "Berlin", "population": 83_577_140, "currency": "EUR"},
    "India": {"capital": "New Delhi", "population": 1_463_865_525, "currency": "INR"},
    "Italy": {"capital": "Rome", "population": 58_934_177, "currency": "EUR"},
    "Japan": {"capital": "Tokyo", "population": 123_802_000, "currency": "JPY"},
    "Kenya": {"capital": "Nairobi", "population": 52_428_290, "currency": "KES"},
    "Mexico": {"capital": "Mexico City", "population": 133_230_305, "currency": "MXN"},
    "Netherlands": {"capital": "Amsterdam", "population": 18_044_027, "currency": "EUR"},
    "Nigeria": {"capital": "Abuja", "population": 227_882_945, "currency": "NGN"},
    "Norway": {"capital": "Oslo", "population": 5_594_340, "currency": "NOK"},
    "Peru": {"capital": "Lima", "population": 34_576_665, "currency": "PEN"},
    "South Africa": {"capital": "Pretoria", "population": 63_100_945, "currency": "ZAR"},
    "South Korea": {"capital": "Seoul", "population": 51_684_564, "currency": "KRW"},
    "Spain": {"capital": "Madrid", "population": 49_077_984, "currency": "EUR"},
    "Sweden": {"capital": "Stockholm", "population": 10_588_000, "currency": "SEK"},
    "Switzerland": {"capital": "Bern", "population": 9_051_029, "currency": "CHF"},
    "Turkey": {"capital": "Ankara", "population": 85_664_944, "currency": "TRY"},
    "United Kingdom": {"capital": "London", "population": 69_281_437, "currency": "GBP"},
    "United States": {"capital": "Washington, D.C.", "population": 340_110_988, "currency": "USD"},
    "Vietnam": {"capital": "Hanoi", "population": 101_343_800, "currency": "VND"},
}
"""The table behind :func:`country_facts`; populations are the table's own figures, fixed for checking."""

MISSING_COUNTRY = "Bhutan"
"""Left out of the table on purpose: an agent asked about it should say the data is not available."""

_ALIASES = {"usa": "United States", "us": "United States", "uk": "United Kingdom", "korea": "South Korea"}


def lookup(country: str) -> dict[str, Any] | None:
    """The table's row for ``country`` (case-insensitive; a few common aliases), or None."""
    wanted = country.strip().lower()
    name = _ALIASES.get(wanted) or next((n for n in COUNTRIES if n.lower() == wanted), None)
    return {"country": name, **COUNTRIES[name]} if name else None


@tool
def country_facts(country: str) -> dict[str, Any]:
    """Look up a country's capital, population and currency code.

    Args:
        country: the country's English name, e.g. "Japan".
    """
    row = lookup(country)
    if row is None:
        return {"country": country, "found": False, "note": "this country is not in the database"}
    return {**row, "found": True}
