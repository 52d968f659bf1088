"""Showing untrusted text safely: case ids, categories, replies, reasons, error messages and experiment names
come from datasets, agents and stores that may be hostile, and must display as the characters they are.

One source of truth for every renderer: the terminal (control sequences would clear the screen, set the
title or hide text), markdown (images load on view, links and emphasis change what is read, a line break ends
a table row) and HTML (tags); everywhere, bidirectional overrides reorder what is read and zero-width
characters make two ids look alike. Apply these to displayed values only, never to stored data or JSON,
which keeps the raw text (``json.dumps`` already escapes it).
"""

from __future__ import annotations

import re

BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
"""Characters that reorder or isolate the text around them (Trojan Source, CVE-2021-42574)."""
INVISIBLE = "\u00ad\u180e\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u2028\u2029"
"""Characters that take no room (zero-width space, joiners, word joiner, soft hyphen, byte order mark), so that
``case\u200b1`` reads as ``case1``, and the line and paragraph separators, which ``str.splitlines`` and some
terminals take for line breaks."""
SHOWN_AS_CODE_POINTS = BIDI_CONTROLS + INVISIBLE
"""Shown as their code point in angle brackets: a zero-width space as ``<U+200B>``."""

_CONTROL = "\x00-\x09\x0b-\x1f\x7f-\x9f"
"""C0 controls but newline, DEL and C1 controls."""
_UNSAFE = re.compile(f"[{_CONTROL}{SHOWN_AS_CODE_POINTS}]")
_UNSAFE_OR_NEWLINE = re.compile(f"[\n{_CONTROL}{SHOWN_AS_CODE_POINTS}]")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_MARKDOWN_PUNCTUATION = r"\\`*_\[\]!|~#$"
"""Backslash-escaped in markdown so that no link, image, emphasis, code span, math, heading close or table pipe
forms (HTML is taken care of by entities; a cell never starts a line, so list and block markers stay)."""
_MARKDOWN_ESCAPED = re.compile(f"((?<![0-9A-Za-z])_|_(?![0-9A-Za-z])|[{_MARKDOWN_PUNCTUATION.replace('_', '')}])")
"""An underscore between letters or digits (``trial_id``) cannot start or end emphasis, so it stays as it is."""
_MARKDOWN_SPECIAL = re.compile(f"[\r\n<>&{_MARKDOWN_PUNCTUATION}{_CONTROL}{SHOWN_AS_CODE_POINTS}]")


def _escape(char: str) -> str:
    code = ord(char)
    return f"<U+{code:04X}>" if char in SHOWN_AS_CODE_POINTS else f"\\x{code:02x}"


def visible(text: object, *, newlines: bool = False) -> str:
    """``text`` with control, bidirectional and invisible characters shown as escapes (ESC as ``\\x1b``, U+202E
    as ``<U+202E>``, a zero-width space as ``<U+200B>``). A newline is kept when ``newlines`` is true (a table
    cell), else shown as ``\\x0a``, so a value cannot forge a line of its own."""
    text = str(text)
    pattern = _UNSAFE if newlines else _UNSAFE_OR_NEWLINE
    if pattern.search(text) is None:  # the usual case costs one scan
        return text
    return pattern.sub(lambda m: _escape(m.group()), text)


def markdown_cell(text: object) -> str:
    """``text`` as literal GitHub-flavoured markdown that stays inside one table cell: line breaks become
    spaces, controls visible escapes, ``<``, ``>`` and ``&`` HTML entities, markdown punctuation
    backslash-escaped."""
    text = str(text)
    if _MARKDOWN_SPECIAL.search(text) is None:  # most cells: nothing to escape
        return text
    import html  # here, not at the top: `agenteval --help` reads this module and never needs it

    flat = _LINE_BREAK.sub(" ", text)
    escaped = html.escape(visible(flat), quote=False)
    return _MARKDOWN_ESCAPED.sub(r"\\\1", escaped)


def html_text(text: object) -> str:
    """``text`` for an HTML page: control, bidirectional and invisible characters visible, then HTML-escaped."""
    import html

    return html.escape(visible(text, newlines=True))
