"""Showing results: tables in several formats, the terminal views, the report's formats; stored text is
made safe for each (no terminal control, no markup)."""

from ._report_formats import FORMATS as REPORT_FORMATS
from ._report_formats import to_html, to_json, to_markdown, to_terminal
from ._tables import FORMATS as TABLE_FORMATS
from ._tables import render
from ._text_safety import html_text, markdown_cell, visible

__all__ = [
    "REPORT_FORMATS",
    "TABLE_FORMATS",
    "html_text",
    "markdown_cell",
    "render",
    "to_html",
    "to_json",
    "to_markdown",
    "to_terminal",
    "visible",
]
