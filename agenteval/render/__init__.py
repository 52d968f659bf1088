"""Showing results: tables in several formats, the terminal views, the report's formats; stored text is
made safe for each (no terminal control, no markup).

Names are imported on first use: a command that only needs a format's name (``agenteval --help``) does not
load every renderer.
"""

from typing import TYPE_CHECKING

from agenteval_instrumentation._lazy import lazy_exports

if TYPE_CHECKING:
    from ._report_formats import FORMATS as REPORT_FORMATS
    from ._report_formats import to_html, to_json, to_markdown, to_terminal
    from ._tables import FORMATS as TABLE_FORMATS
    from ._tables import render
    from ._text_safety import html_text, markdown_cell, visible

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._report_formats": ("REPORT_FORMATS=FORMATS", "to_html", "to_json", "to_markdown", "to_terminal"),
        "._tables": ("TABLE_FORMATS=FORMATS", "render"),
        "._text_safety": ("html_text", "markdown_cell", "visible"),
    },
)
