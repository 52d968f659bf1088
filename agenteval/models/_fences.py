"""Untrusted text in a prompt to a model (an agent's reply, a production trace's input), fenced in tags it cannot
close: the LLM judge's and the simulated user's prompts both show a conversation this way, so that a reply cannot
write outside its fence and pass for the prompt's own words (a fake expected answer, a user who is done)."""

from __future__ import annotations

import re

CONVERSATION, USER, ASSISTANT, EXPECTED, RUBRIC = "conversation", "user", "assistant", "expected_answer", "rubric"
PROMPT_TAGS = (CONVERSATION, USER, ASSISTANT, EXPECTED, RUBRIC)
"""Every tag agenteval's prompts fence text in; any of them inside fenced text is defused, whichever prompt it is."""

_OPENERS = "<\uff1c\ufe64"
"""``<`` and the look-alikes a model reads as one: full-width and small ``<``."""
_BETWEEN = r"[\s/\\\u2044\u2215\uff0f\uff3c\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]*"
"""What may stand between the ``<`` and a tag's name and still read as that tag to a model: spaces, any number of
slashes and backslashes (``<//assistant>``, ``<\\/assistant>``) and their look-alikes (the fraction and division
slashes, the full-width slash and backslash that go with a full-width ``＜``), and characters that show as nothing
(zero-width spaces and joiners, the soft hyphen, direction marks, the byte order mark)."""
_FENCE_TAG = re.compile(rf"[{_OPENERS}](?={_BETWEEN}(?:{'|'.join(PROMPT_TAGS)})\b)", re.IGNORECASE)
"""The ``<`` of anything in a message that reads as one of the prompts' own tags, opening or closing."""


def fenced(tag: str, text: str) -> str:
    """``text`` between ``<tag>`` and ``</tag>``, with anything inside it that reads as one of the prompts' own tags
    defused (its ``<`` as ``&lt;``), so that untrusted text (an agent's reply, a production trace's input) cannot
    close its fence and write outside it."""
    return f"<{tag}>\n{_FENCE_TAG.sub('&lt;', text)}\n</{tag}>"
