"""Finding secrets in captured content: by key name, by URL query parameter, by header pair, and by
the shape of the value itself (bearer tokens, provider keys, AWS key ids with the secret key after them, Google
OAuth tokens, Entra client secrets, JWTs, PEM private keys).

Pure functions with no settings: :mod:`.capture` decides when they run. The value-shape scan is the
one that costs, so it runs only on strings long enough to hold a secret that also contain one of a
few literal hints; short plain text never reaches a regular expression.
"""

from __future__ import annotations

import bisect
import functools
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import accumulate, chain, zip_longest
from operator import add
from typing import Any

MASK = "***"

# A key is secret when its last word, or its last two words, name a secret. Keys are split into
# words whatever their case style (snake_case, camelCase, kebab-case, dotted), so "openaiApiKey",
# "X-Api-Key" and "OPENAI_API_KEY" all end in "api key"; "max_tokens" and "token_count" do not.
SECRET_LAST_WORDS = frozenset(
    (
        "apikey",
        "auth",
        "authorization",
        "bearer",
        "cookie",
        "credential",
        "credentials",
        "jwt",
        "passphrase",
        "passwd",
        "password",
        "privatekey",
        "pwd",
        "secret",
        "secretkey",
        "secrets",
        "sessionid",
        "sig",
        "signature",
        "token",
    )
)
SECRET_LAST_PAIRS = frozenset(
    (
        ("access", "key"),
        ("account", "key"),
        ("api", "key"),
        ("encryption", "key"),
        ("master", "key"),
        ("private", "key"),
        ("secret", "key"),
        ("session", "id"),
        ("signing", "key"),
    )
)

_CASE_CHANGE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_ALPHANUMERIC = re.compile(r"[^A-Za-z0-9]+")


CACHED_KEY_CHARS = 256
"""Keys up to this long are remembered (:func:`is_secret_key`); a longer one, a name read out of untrusted text, is
judged anew each time, so the cache never holds megabytes of someone else's text."""


_SECRET_HINT = re.compile("key|auth|bearer|cookie|credential|jwt|pass|pwd|secret|session|sig|token", re.IGNORECASE)
"""A piece of every secret last word and last pair above (each word is a piece of its key): a key without one names
no secret, told by one search. Splitting a key into words costs ~4 µs, and a request of 1.5 million distinct keys,
none of them in the cache, spent 12 s of CPU on it."""


def is_secret_key(key: str) -> bool:
    """True for keys that look like they hold a secret (``api_key``, ``openaiApiKey``, ``x-api-key``,
    ``password``, ``githubToken``, ``jwt``, ...); not ``max_tokens`` or ``token_count``."""
    return _is_secret_key(key) if len(key) <= CACHED_KEY_CHARS else _secret_words(key)


@functools.lru_cache(maxsize=4096)
def _is_secret_key(key: str) -> bool:
    return _secret_words(key)


def _secret_words(key: str) -> bool:
    if _SECRET_HINT.search(key) is None:
        return False
    words = [w.lower() for w in _NOT_ALPHANUMERIC.split(_CASE_CHANGE.sub("_", key)) if w]
    if not words:
        return False
    return words[-1] in SECRET_LAST_WORDS or tuple(words[-2:]) in SECRET_LAST_PAIRS


URL_SECRET_PARAMETERS = frozenset(("key", "code"))
"""Names that hold a secret as a URL's query or form parameter, and not elsewhere: ``?key=`` (Google's APIs, many
gateways), ``?code=`` (Azure Functions, OAuth's authorization code). A ``key`` in a mapping, a YAML line or prose
names anything (``"key": "service.name"`` of OTLP JSON)."""


def is_secret_parameter(name: str) -> bool:
    """True for a URL query or form parameter that holds a secret: a secret's name (:func:`is_secret_key`:
    ``api-key``, ``sig``, ``access_token``, ...) or one of :data:`URL_SECRET_PARAMETERS`."""
    return name.lower() in URL_SECRET_PARAMETERS or is_secret_key(name)


def is_secret_pair(item: object) -> bool:
    """A ``(name, value)`` pair whose name is secret, as headers are often given:
    ``[("Authorization", "Bearer ...")]``."""
    return (
        (type(item) is tuple or type(item) is list)
        and len(item) == 2
        and type(item[0]) is str
        and is_secret_key(item[0])
    )


OPTION_SECRET_NAMES = frozenset(("key",))
"""Names that hold a secret as an option given to an agent (``--agent-option key=...``, ``{"key": ...}``) though
not elsewhere: an option is a setting someone typed, where a bare ``key`` is a key; in captured content a ``key``
names anything (``"key": "service.name"``)."""


def is_secret_option(name: str) -> bool:
    """True for an agent option that holds a secret: a secret's name (:func:`is_secret_key`: ``api_key``,
    ``token``, ``secret``, ``password``, ...) or one of :data:`OPTION_SECRET_NAMES` (``key``)."""
    return name.lower() in OPTION_SECRET_NAMES or is_secret_key(name)


def mask_setting(name: str, value: Any, secret: Callable[[str], bool] = is_secret_key) -> Any:
    """``value`` as a setting called ``name`` may be recorded: ``***`` under a secret name (``secret`` says which
    names are: :func:`is_secret_key`, or :func:`is_secret_option` for an agent's options), text with its secrets
    masked, mappings and lists masked item by item, anything else as it is."""
    if secret(name):
        return MASK
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, Mapping):
        return {key: mask_setting(str(key), item, secret) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_setting(name, item, secret) for item in value]
    return value


# Values that are secrets whatever key they sit under, also inside longer text. Each shape starts
# with a literal its own cheap ``in`` check looks for first, and each pattern begins with that
# literal so the regex engine jumps between occurrences instead of trying every position. A shape inside a longer
# word ("xASIA...") is no key: the look-behind after the literal says so, so the engine moves on to the next
# occurrence rather than consuming the text the match would have taken.
_NOT_IN_A_WORD = r"(?<![^\W_]{literal})"
_SHAPES = (
    # A PEM block cut before its END line is masked to the end.
    (
        "PRIVATE KEY",
        re.compile(r"-----BEGIN[A-Z ]*PRIVATE KEY-----.*?(?:-----END[A-Z ]*PRIVATE KEY-----|\Z)", re.DOTALL),
    ),
    # The scheme word stays, so the text stays readable; the token must hold a digit, so prose
    # ("the bearer of bad news") is left alone.
    ("earer", re.compile(r"(?<![^\W_])(?P<scheme>[Bb]earer\s+)(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{8,}=*")),
    # AWS access key ids, and the secret key when it follows its id as credential files and CSV exports give them
    # ("AKIA...,wJalr...", "AKIA... wJalr..."): 40 characters of base64 and nothing more of it.
    (
        "IA",
        re.compile(
            "A"
            + _NOT_IN_A_WORD.format(literal="A")
            + r"[KS]IA[A-Z0-9]{16}(?![A-Za-z0-9])(?:[ \t,:;|'\"]{1,4}[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=]))?"
        ),
    ),
    ("AIza", re.compile("AIza" + _NOT_IN_A_WORD.format(literal="AIza") + r"[0-9A-Za-z_-]{35}")),  # Google API keys
    # Google OAuth access tokens.
    ("ya29.", re.compile("ya29" + _NOT_IN_A_WORD.format(literal="ya29") + r"\.[0-9A-Za-z_-]{20,}+")),
    # Microsoft Entra (Azure AD) client secrets: three characters, a digit, "Q~", then 31 to 34 more. The hint keeps
    # every other text away from a pattern that starts with no literal.
    ("Q~", re.compile(r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])")),
)
# JWTs: found by :func:`_mask_jwts`, not by a substitution. A JWT's first part runs to a dot, so every "eyJ" of a run
# of token characters ("-eyJ-eyJ-eyJ...") would read the rest of the run again: time growing with the square of its
# length (0.5 s for 40,000 characters).
_JWT = re.compile(
    "eyJ" + _NOT_IN_A_WORD.format(literal="eyJ") + r"[A-Za-z0-9_-]{4,}+\.eyJ[A-Za-z0-9_-]{4,}+(?:\.[A-Za-z0-9_-]*+)?"
)
_JWT_PART = re.compile(r"[A-Za-z0-9_-]*+")
_WORD_CHARACTER = re.compile(r"[^\W_]")
# Provider tokens: a prefix word, "-" or "_", then a long run of token characters: (who, the words, the separator,
# the rest as a regular expression).
_PROVIDER_TOKENS = (
    ("OpenAI (sk-, sk-proj-), Anthropic (sk-ant-), OpenRouter, DeepSeek", ("sk",), "-", r"[A-Za-z0-9_-]{12,}"),
    ("Stripe secret and restricted keys", ("sk", "rk"), "_", r"(?:live|test)_[A-Za-z0-9]{10,}"),
    ("Stripe webhook secrets", ("whsec",), "_", r"[A-Za-z0-9]{20,}"),
    ("GitHub", ("ghp", "gho", "ghu", "ghs", "ghr"), "_", r"[A-Za-z0-9_]{20,}"),
    ("GitHub fine-grained", ("github",), "_", r"pat_[A-Za-z0-9_]{20,}"),
    ("GitLab", ("glpat",), "-", r"[A-Za-z0-9_-]{20,}"),
    ("Hugging Face", ("hf",), "_", r"[A-Za-z0-9]{30,}"),
    ("Slack", ("xoxa", "xoxb", "xoxe", "xoxp", "xoxr", "xoxs", "xapp"), "-", r"[A-Za-z0-9-]{10,}"),
    ("npm", ("npm",), "_", r"[A-Za-z0-9]{36,}"),
    ("PyPI", ("pypi",), "-", r"AgE[A-Za-z0-9_-]{50,}"),
    ("Groq", ("gsk",), "_", r"[A-Za-z0-9]{40,}"),
    ("xAI", ("xai",), "-", r"[A-Za-z0-9]{40,}"),
    ("Perplexity", ("pplx",), "-", r"[A-Za-z0-9]{40,}"),
    ("Replicate", ("r8",), "_", r"[A-Za-z0-9]{30,}"),
    ("Google OAuth client secrets", ("GOCSPX",), "-", r"[A-Za-z0-9_-]{24,}"),
)
_PREFIXED_TOKEN = re.compile(
    "|".join(f"(?:{'|'.join(words)}){separator}{rest}" for _, words, separator, rest in _PROVIDER_TOKENS)
)


def _token_separator(separator: str) -> re.Pattern[str]:
    """Where a token may start, found from its separator rather than with one substring test per prefix (each a
    pass over the text): ``separator`` is a literal the engine jumps to, and only where the two characters before
    it end a prefix word and a long run follows is the word read and the prefixes tried (:func:`_mask_prefixed_tokens`);
    "gpt-4o-mini-2024-07-18" and snake_case names are passed in C."""
    endings = sorted({word[-2:] for _, words, used, _ in _PROVIDER_TOKENS if used == separator for word in words})
    return re.compile(f"{separator}(?<=(?:{'|'.join(endings)}){separator})(?=[A-Za-z0-9_-]{{10}})")


_TOKEN_SEPARATORS = (("-", _token_separator("-")), ("_", _token_separator("_")))
LONGEST_TOKEN_PREFIX = max(len(word) for _, words, _, _ in _PROVIDER_TOKENS for word in words)
"""The longest word before a token's separator ("github" of github_pat_): a longer word starts no token."""
_ASCII_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
# A value given to a name: name=value in a URL query, a form body or a log line, and name: value in a header
# line, a YAML line or a repr of a mapping; quoted or not (api_key='...' in a repr, "token": "..." in JSON text,
# with the escaped quotes of JSON inside JSON). Only the value of a secret name is masked, and an HTTP auth
# scheme before it ("Authorization: Basic ...") stays. Separators are found first (one character class, found
# fast), the name is read backwards from each, and only after a secret name is a value looked for.
_SEPARATOR = re.compile(r"[=:]")
_ENDINGS = {*SECRET_LAST_WORDS, *(last for _, last in SECRET_LAST_PAIRS), *URL_SECRET_PARAMETERS}
_SECRET_ENDINGS = tuple(sorted(e for e in _ENDINGS if not any(e != o and e.endswith(o) for o in _ENDINGS)))
"""How every secret name ends, whatever its case style: most separators follow no such name (12:30, https:,
"n": 1), and a test of the text's ending (in C) leaves them before the name is read. An ending that ends with
another ("apikey", "key") is left out: each costs a search of the whole text."""
_VALUE = re.compile(
    r"""[ \t]*(?:(?P<quote>\\*["'])|(?P<scheme>(?:Basic|Bearer|Digest|Token|ApiKey)[ \t]+)?(?P<bare>"""
    # A bare value ends at a separator of its context (&, #, a space, a quote, ",", ";", <, >) or at a closing
    # bracket that nothing of the value follows; a run of backslashes ends it only before a quote (\" of JSON in
    # JSON). Runs are taken whole (possessive): looking ahead from each backslash of a run in turn took time growing
    # with the square of its length (12 s for 40,000 backslashes after "token=a").
    r"""(?:[^&#\s"'<>,;\\)\]}]|\\++(?!["'])|[)\]}]++(?=[^&#\s"'<>,;\\)\]}]))+))"""
)
_OPENERS = {")": "(", "]": "[", "}": "{"}
_NAME_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-[]")
_CLOSERS = " \t\"'\\"
_NAME_CLOSERS = frozenset(_CLOSERS)
"""What may stand between a name and its separator: spaces, and the quotes of a quoted name."""
_JSON_WORDS = frozenset(("null", "true", "false"))
"""Bare JSON values that hold nothing, left as they are: masking them would say a secret was there."""
# user:password@ in a URL.
_USERINFO = re.compile(r"://([^/\s:@]+):([^/\s@]+)@")

SHORTEST_SECRET_TEXT = 8
"""Strings shorter than this are never scanned: too short for "token=xyz" or any key shape."""


def might_hold_secret(text: str) -> bool:
    """A cheap pre-check: False means :func:`mask_text` would leave ``text`` as it is."""
    if len(text) < SHORTEST_SECRET_TEXT:
        return False
    if "=" in text or ":" in text:
        return True
    if "%" in text and _ENCODED_HINT.search(text):  # sig%3D...
        return True
    if "eyJ" in text:
        return True
    for hint, _ in _SHAPES:
        if hint in text:
            return True
    return any(separator in text and pattern.search(text) for separator, pattern in _TOKEN_SEPARATORS)


def mask_text(text: str) -> str:
    """``text`` with every secret found in it replaced in place by ``***``."""
    if len(text) < SHORTEST_SECRET_TEXT:
        return text
    if "=" in text or ":" in text:
        text = _mask_parameters(text)
    if "%" in text and _ENCODED_HINT.search(text):
        text = _mask_encoded(text)
    if "://" in text:
        text = _USERINFO.sub(rf"://\1:{MASK}@", text)
    for hint, shape in _SHAPES:
        if hint in text:
            text = shape.sub(_mask_shape, text)
    if "eyJ" in text:
        text = _mask_jwts(text)
    for separator, pattern in _TOKEN_SEPARATORS:
        if separator in text:
            text = _mask_prefixed_tokens(text, pattern)
    return text


def _mask_parameters(text: str) -> str:
    """``text`` with the value given to each secret name masked (see ``_VALUE``)."""
    return _masked_ranges(text, _secret_values(text))


def _masked_ranges(text: str, ranges: Iterable[tuple[int, int]]) -> str:
    """``text`` with each of ``ranges`` (in order, apart) replaced by ``***``."""
    kept: list[str] = []
    done = 0
    for start, end in ranges:
        kept += [text[done:start], MASK]
        done = end
    return "".join(kept) + text[done:] if kept else text


def _secret_values(text: str) -> Iterator[tuple[int, int]]:
    """Where the value given to each secret name lies in ``text``, in order: inside its quotes when quoted."""
    done = 0
    brackets = _Brackets(text)
    for at in _candidate_separators(text):
        if at < done:
            continue
        if not _secret_name_before(text, at):
            continue
        value = _VALUE.match(text, at + 1)
        if value is None or value["bare"] in _JSON_WORDS:
            continue
        if quote := value["quote"]:
            end = _closing_quote_end(text, value.end(), quote)
            yield value.end(), (end - len(quote) if end else len(text))
            done = end or len(text)
        else:
            done = _past_unopened_closers(text, brackets.before(at), value.end())
            yield value.start("bare"), done


# URL-encoded text: a URL inside another's query (``?next=https%3A%2F%2Fh%2Fp%3Fsig%3D...``), a form body, a header
# line encoded into a URL (``X-Api-Key%3A%20...``, ``Authorization%3A+Bearer+...``), a name with an encoded
# character (``api%5Fkey=``). Looked at only when an encoded separator, or an escape in a name before a separator,
# is there: most text with a ``%`` is a plain encoded path or prose.
# An encoded "%" (``%25``) may start any of these encoded again: ``token%253D...``, ``api%255Fkey=``.
_ENCODED_HINT = re.compile(r"%(?:25|3[ADad]|[0-7][0-9A-Fa-f][A-Za-z0-9_.\-\[\]]*[=:])")
DECODING_ROUNDS = 4
"""How many times encoded text is decoded in search of secret names: a URL put into a query, and that query into
another, is encoded twice or three times (``api%255Fkey=``, ``token%25253D``); past a few rounds nothing legitimate is
left, and each round is a pass over the text."""
# One level of escapes, ASCII ones only (what the names, separators and value endings are made of), and a "+" as
# the space it stands for in a query or a form. A value's own characters stay as they are: a masked range is
# mapped back onto the text as it was.
_ESCAPE = re.compile(r"(%[0-7][0-9A-Fa-f])")
_ASCII_ESCAPES = {
    f"%{code >> 4}{digit}": chr(code) for code in range(128) for digit in {f"{code & 15:X}", f"{code & 15:x}"}
}


def _mask_encoded(text: str) -> str:
    """``text`` with the secrets its URL-encoded parts give to secret names masked in place: the names, separators
    and value endings are read decoded (``sig%3D``, ``api%5Fkey=``, ``Key%3A%20``), once and again while escapes are
    left, up to :data:`DECODING_ROUNDS` times (``api%255Fkey=``, ``token%253D``), the value masked as it was written.
    The password of an encoded ``scheme://user:password@`` too."""
    ranges: list[tuple[int, int]] = []
    layers: list[list[int]] = []  # where each round's escapes sat in its decoded text, the first round's first
    decoded = text
    for _ in range(DECODING_ROUNDS):
        decoded, escapes = _decoded(decoded)
        if not escapes:
            break
        layers.append(escapes)
        found = list(_secret_values(decoded))
        if "://" in decoded:
            found += [m.span(2) for m in _USERINFO.finditer(decoded)]
        ranges += [(_original(start, layers), _original(end, layers)) for start, end in found]
    if not ranges:
        return text
    return _masked_ranges(text, _apart(sorted(set(ranges))))


def _original(at: int, layers: list[list[int]]) -> int:
    """Where position ``at`` of text decoded ``len(layers)`` times lies in the text as written: each escape before
    it was two characters longer before its round, the last round's undone first."""
    for escapes in reversed(layers):
        at += 2 * bisect.bisect_left(escapes, at)
    return at


def _decoded(text: str) -> tuple[str, list[int]]:
    """``text`` with its ASCII escapes decoded and its "+" read as spaces (a "+" is never part of an escape: it is
    replaced first, and ``%2B`` stays a plus), and where each escape sits in it. Split and joined in C: a Python call
    per escape took seconds for a megabyte of them."""
    parts = _ESCAPE.split(text.replace("+", " "))
    plain, escaped = parts[0::2], parts[1::2]
    decoded = "".join(chain.from_iterable(zip_longest(plain, map(_ASCII_ESCAPES.__getitem__, escaped), fillvalue="")))
    return decoded, list(map(add, accumulate(map(len, plain[:-1])), range(len(escaped))))


def _apart(ranges: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Ranges in order with those that overlap an earlier one merged into it."""
    merged: list[int] | None = None
    for start, end in ranges:
        if merged is not None and start <= merged[1]:
            merged[1] = max(merged[1], end)
            continue
        if merged is not None:
            yield merged[0], merged[1]
        merged = [start, end]
    if merged is not None:
        yield merged[0], merged[1]


def _closing_quote_end(text: str, start: int, quote: str) -> int | None:
    """Just past the quote that closes a value opened by ``quote`` (a quote after the backslashes escaping it, as
    JSON inside JSON has them) at ``start``; None when nothing closes it (a value cut short). A quote closes the
    value when escaped as the opening one was: in JSON inside JSON, ``\\"`` closes and ``\\\\\\"`` (a quote
    escaped inside) does not, so the value's end is found whatever quotes and backslashes it holds."""
    escapes = len(quote) - 1
    at = start
    while (at := text.find(quote[-1], at)) >= 0:
        run = at
        while run > start and text[run - 1] == "\\":
            run -= 1
        if (at - run) % (2 * escapes + 2) == escapes:
            return at + 1
        at += 1
    return None


class _Brackets:
    """How many of each bracket a text holds before a position. The positions asked about come in order (the
    separators of :func:`_mask_parameters`), so the counts go on from the last one and the text is read once:
    counting from its start at each value took time growing with the square of its length."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.counted = 0
        self.counts = dict.fromkeys("()[]{}", 0)

    def before(self, position: int) -> dict[str, int]:
        for bracket in self.counts:
            self.counts[bracket] += self.text.count(bracket, self.counted, position)
        self.counted = position
        return self.counts


def _past_unopened_closers(text: str, before_name: dict[str, int], end: int) -> int:
    """``end`` moved past the closing brackets right after a bare value that open no bracket before the value's
    name (``before_name``: the brackets counted before its separator): ``password=abc)`` ends with its ``)``,
    ``Settings(api_key=abc)`` keeps its own."""
    while end < len(text) and (opener := _OPENERS.get(text[end])):
        if before_name[opener] > before_name[text[end]]:
            break
        end += 1
    return end


FEW_SEPARATORS = 8
"""Up to this many separators in a text, each is looked at; past it, the secret names' endings are searched for."""


def _candidate_separators(text: str) -> list[int]:
    """The separators that follow the ending of a secret name (up to three closers between), in order. Found from
    the endings, one search in C each, rather than from every colon of the text: most text has colons (times,
    JSON, "Answer: ...") and few secret names."""
    # A few separators are looked at one by one; so is text of other scripts, whose lower() may change its length.
    if text.count(":") + text.count("=") <= FEW_SEPARATORS or not text.isascii():
        return [
            m.start()
            for m in _SEPARATOR.finditer(text)
            if text[max(0, m.start() - 16) : m.start()].rstrip(_CLOSERS).lower().endswith(_SECRET_ENDINGS)
        ]
    lowered = text.lower()
    found = set()
    for ending in _SECRET_ENDINGS:
        at = lowered.find(ending)
        while at >= 0:
            end = at + len(ending)
            closers_end = min(len(text), end + 3)
            while end < closers_end and text[end] in _NAME_CLOSERS:
                end += 1
            if end < len(text) and text[end] in "=:":
                found.add(end)
            at = lowered.find(ending, at + 1)
    return sorted(found)


def _secret_name_before(text: str, separator: int) -> bool:
    end = separator
    while end > max(0, separator - 3) and text[end - 1] in _NAME_CLOSERS:  # "token" : and \"token\": in JSON
        end -= 1
    start = end
    while start > 0 and text[start - 1] in _NAME_CHARACTERS:
        start -= 1
    if start == end:
        return False
    name = text[start:end]
    if end == separator and text[separator] == "=" and start and text[start - 1] in "?&":
        return is_secret_parameter(name)
    return is_secret_key(name)


def _mask_shape(match: re.Match[str]) -> str:
    return (match.groupdict().get("scheme") or "") + MASK


def _mask_jwts(text: str) -> str:
    """``text`` with its JWTs masked (``_JWT``). Where a JWT's first part cannot start (not followed by a dot and a
    second part), no later "eyJ" of the same run can either: the search goes on past the run."""
    kept: list[str] = []
    done = at = 0
    while (at := text.find("eyJ", at)) >= 0:
        if (token := _JWT.match(text, at)) is not None:
            kept += [text[done:at], MASK]
            done = at = token.end()
        elif at and _WORD_CHARACTER.match(text, at - 1):  # inside a word: a later "eyJ" of the run may start one
            at += 3
        else:
            at = _JWT_PART.match(text, at).end()  # type: ignore[union-attr]
    return "".join(kept) + text[done:] if kept else text


def _mask_prefixed_tokens(text: str, separators: re.Pattern[str]) -> str:
    """``text`` with the provider tokens (``_PREFIXED_TOKEN``) whose first separator ``separators`` finds masked."""
    kept: list[str] = []
    done = 0
    for found in separators.finditer(text):
        start = found.start()
        if start < done:
            continue
        while start > 0 and text[start - 1] in _ASCII_ALNUM and found.start() - start <= LONGEST_TOKEN_PREFIX:
            start -= 1
        if start and text[start - 1].isalnum():  # inside a longer word ("risk-assessment-..."): not a key
            continue
        token = _PREFIXED_TOKEN.match(text, start)
        if token is not None:
            kept += [text[done:start], MASK]
            done = token.end()
    return "".join(kept) + text[done:] if kept else text


class SecretMaskingFilter(logging.Filter):
    """Masks a log record in place (:func:`mask_text`), before any handler formats it: its message with its
    arguments, its traceback and its stack. For loggers whose records quote what others wrote: an exception from an
    HTTP client naming a URL with a key (``?api-key=``, ``user:password@``), an error body echoing a header."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # arguments that do not fit the format: the handler reports it, as it would unfiltered
            return True
        record.msg, record.args = mask_text(message), None
        if record.exc_info and not record.exc_text:  # handlers' formatters use exc_text once it is set
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_text(record.exc_text)
        if record.stack_info:
            record.stack_info = mask_text(record.stack_info)
        return True


LOG_MASKING = SecretMaskingFilter()
"""The one filter: added to a logger once, however often it is asked for."""


def masked_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with its records masked (:class:`SecretMaskingFilter`). A filter sees only the
    records of the logger it is added to, not its children's: each module asks for its own."""
    logger = logging.getLogger(name)
    logger.addFilter(LOG_MASKING)
    return logger
