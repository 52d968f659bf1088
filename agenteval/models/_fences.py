"""Untrusted text in a prompt to a model (an agent's reply, a production trace's input), fenced in tags it cannot
close: the LLM judge's and the simulated user's prompts both show a conversation this way, so that a reply cannot
write outside its fence and pass for the prompt's own words (a fake expected answer, a user who is done)."""

from __future__ import annotations

import re

CONVERSATION, USER, ASSISTANT, EXPECTED, RUBRIC = "conversation", "user", "assistant", "expected_answer", "rubric"
PROMPT_TAGS = (CONVERSATION, USER, ASSISTANT, EXPECTED, RUBRIC)
"""Every tag agenteval's prompts fence text in; any of them inside fenced text is defused, whichever prompt it is."""

_FENCE_TAG = re.compile(rf"<(?=\s*/?\s*(?:{'|'.join(PROMPT_TAGS)})\b)", re.IGNORECASE)
"""The ``<`` of anything in a message that reads as one of the prompts' own tags, opening or closing."""


def fenced(tag: str, text: str) -> str:
    """``text`` between ``<tag>`` and ``</tag>``, with any of the prompts' own tags inside it defused (``&lt;``), so
    that untrusted text (an agent's reply, a production trace's input) cannot close its fence and write outside it."""
    return f"<{tag}>\n{_FENCE_TAG.sub('&lt;', text)}\n</{tag}>"
