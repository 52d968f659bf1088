"""Secrets are masked by key name (any case style), URL parameter, header pair and value shape, also
inside free text, wherever the value sits; look-alike names and prose stay visible."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, NamedTuple

import pyarrow.parquet as pq
import pydantic
import pytest

from agenteval.store import Store
from agenteval_instrumentation import attributes as A
from agenteval_instrumentation import capture, configure_capture, llm_call, tool
from agenteval_instrumentation.masking import MASK, is_secret_key, mask_text


@pytest.fixture(autouse=True)
def _default_capture(monkeypatch):
    monkeypatch.delenv(capture.ENV_CAPTURE_CONTENT, raising=False)
    saved = dataclasses.replace(capture.config)
    configure_capture(enabled=True)
    yield
    for field in dataclasses.fields(saved):
        setattr(capture.config, field.name, getattr(saved, field.name))


PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAplantedPemBody0123456789\nZmFrZWtleQ==\n"
    "-----END RSA PRIVATE KEY-----"
)
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJlUGxhbnRlZA"

# (form, value to capture, secret that must not be recorded, text that must stay readable)
FORMS = [
    (
        "url query parameters",
        {"url": "https://api.example.com/v1/search?api_key=sk-plantedurlkey1234567&token=tokPlanted99&page=2"},
        ("sk-plantedurlkey1234567", "tokPlanted99"),
        "https://api.example.com/v1/search?api_key=***&token=***&page=2",
    ),
    ("url user and password", {"dsn": "postgres://app:hunterPlanted2@db:5432/x"}, ("hunterPlanted2",), "app:***@db"),
    ("header pair", [("X-Api-Key", "plainPlantedHeaderValue")], ("plainPlantedHeaderValue",), '["X-Api-Key", "***"]'),
    ("header pair bearer", [("Authorization", "Bearer sk-plantedbearer123456")], ("plantedbearer",), "Authorization"),
    ("snake key", {"aws_secret_access_key": "wJalrPlantedSnake"}, ("wJalrPlantedSnake",), '"aws_secret_access_key"'),
    ("camel key", {"openaiApiKey": "plantedCamelValue"}, ("plantedCamelValue",), '"openaiApiKey": "***"'),
    ("camel token", {"githubToken": "plantedGithubValue"}, ("plantedGithubValue",), '"githubToken": "***"'),
    ("kebab key", {"x-api-key": "plantedKebabValue"}, ("plantedKebabValue",), '"x-api-key": "***"'),
    ("jwt key", {"jwt": "plantedJwtKeyValue"}, ("plantedJwtKeyValue",), '"jwt": "***"'),
    ("passphrase key", {"passphrase": "plantedPassphrase"}, ("plantedPassphrase",), '"passphrase": "***"'),
    ("bearer in text", {"note": "send Bearer abc123plantedToken now"}, ("abc123plantedToken",), "send Bearer *** now"),
    ("openai key in text", {"note": "key sk-plantedOpenAi0123456789 here"}, ("plantedOpenAi",), "key *** here"),
    ("anthropic key", {"note": "use sk-ant-api03-plantedAnthropic_x1"}, ("plantedAnthropic",), "use ***"),
    ("project key", {"note": "use sk-proj-plantedProject-0123"}, ("plantedProject",), "use ***"),
    ("aws access key id", {"note": "id AKIAPLANTED234567890 ok"}, ("AKIAPLANTED234567890",), "id *** ok"),
    ("aws session key id", {"note": "id ASIAPLANTED234567890 ok"}, ("ASIAPLANTED234567890",), "id *** ok"),
    ("jwt in text", {"note": f"session {JWT} end"}, (JWT[:20], JWT[-12:]), "session *** end"),
    ("pem block", {"note": f"key:\n{PEM}\nthanks"}, ("plantedPemBody", "ZmFrZWtleQ"), "key:\n***\nthanks"),
    # A name given its value in text: a repr, JSON or YAML text, header lines, a command line.
    ("repr", {"note": "Settings(api_key='plantedReprKey', model='m')"}, ("plantedReprKey",), "api_key='***', model"),
    ("repr of a dict", {"note": "bad config {'password': 'planted pass'}"}, ("planted pass",), "{'password': '***'}"),
    ("json text", {"body": '{"token": "plantedJsonTok"}'}, ("plantedJsonTok",), r"{\"token\": \"***\"}"),
    ("yaml line", {"note": "AWS_SECRET_ACCESS_KEY: planted/Yaml+Secret"}, ("planted/Yaml",), "_KEY: ***"),
    ("header line", {"note": "GET /\nx-api-key: plantedHeaderLine\n"}, ("plantedHeaderLine",), "x-api-key: ***\n"),
    ("basic auth", {"note": "Authorization: Basic cGxhbnRlZA=="}, ("cGxhbnRlZA",), "Authorization: Basic ***"),
    ("spaced option", {"argv": "run --api_key = plantedSpaced -q"}, ("plantedSpaced",), "--api_key = *** -q"),
    # Secrets under names that are no secret's elsewhere, or of shapes of their own.
    (
        "url key parameter",
        {"url": "https://www.googleapis.com/books/v1?q=x&key=plantedGoogleKey&alt=json"},
        ("plantedGoogleKey",),
        "?q=x&key=***&alt=json",
    ),
    (
        "azure functions code",
        {"url": "https://fn.azurewebsites.net/api/hook?code=plantedFnCode==&name=a"},
        ("plantedFnCode",),
        "/api/hook?code=***&name=a",
    ),
    (
        "oauth client in a url",
        {"url": "https://oauth2.example.com/token?client_id=app.example&client_secret=plantedClientSecret"},
        ("plantedClientSecret",),
        "client_id=app.example&client_secret=***",
    ),
    ("google oauth token", {"note": "got ya29.a0AfH6SMplantedGoogleTok_x1 ok"}, ("plantedGoogleTok",), "got *** ok"),
    ("google client secret", {"note": "use GOCSPX-plantedGoogleClientSecret01 x"}, ("plantedGoogleClient",), "use ***"),
    ("entra client secret", {"note": "secret Ke08Q~plantedEntraClientSecretValue123 x"}, ("plantedEntra",), "***"),
    (
        "aws key id and secret",
        {"note": "bob,AKIAPLANTED234567890,wJalrXUtnFEMI/K7MDENG/bPxRfiCYplantedKEY\nnext"},
        ("AKIAPLANTED", "plantedKEY"),
        "bob,***\nnext",
    ),
    (
        "azure connection string",
        {"conn": "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=planted+Azure/Key==;EndpointSuffix=x"},
        ("planted+Azure",),
        "AccountName=acct;AccountKey=***;EndpointSuffix=x",
    ),
    (
        "azure service bus",
        {"conn": "Endpoint=sb://ns.example/;SharedAccessKeyName=Root;SharedAccessKey=plantedSbKey+/="},
        ("plantedSbKey",),
        "SharedAccessKeyName=Root;SharedAccessKey=***",
    ),
    (
        "azure sas url",
        {"url": "https://a.blob.core.windows.net/c/b?sv=2022-11-02&sp=r&sig=plantedSas%2Bsig%3D"},
        ("plantedSas",),
        "?sv=2022-11-02&sp=r&sig=***",
    ),
    (
        "s3 presigned url",
        {"url": "https://b.s3.amazonaws.com/k?X-Amz-Signature=plantedAmzSig&X-Amz-Security-Token=plantedAmzTok"},
        ("plantedAmzSig", "plantedAmzTok"),
        "?X-Amz-Signature=***&X-Amz-Security-Token=***",
    ),
]


class Holder(pydantic.BaseModel):
    payload: Any


@dataclasses.dataclass
class Box:
    payload: Any


NESTINGS = {
    "top level": lambda value: value,
    "dict": lambda value: {"outer": {"inner": value}},
    "list": lambda value: [1, [value]],
    "tuple": lambda value: ("first", (value,)),
    "pydantic model": lambda value: Holder(payload=value),
    "dataclass": lambda value: Box(payload=value),
}


@tool
def call_service(request: Any) -> Any:
    return request


def recorded(spans, attribute):
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool call_service"]
    return span.attributes[attribute]


@pytest.mark.parametrize("nesting", NESTINGS)
@pytest.mark.parametrize(("form", "value", "secrets", "readable"), FORMS, ids=[f[0] for f in FORMS])
def test_each_secret_form_is_masked_wherever_it_sits(spans, form, value, secrets, readable, nesting):
    call_service(NESTINGS[nesting](value))
    for attribute in (A.GEN_AI_TOOL_CALL_ARGUMENTS, A.GEN_AI_TOOL_CALL_RESULT):
        text = recorded(spans, attribute)
        json.loads(text)
        for secret in secrets:
            assert secret not in text, (attribute, text)
        assert readable in text.replace("\\n", "\n"), (attribute, text)  # newlines unescaped, for the PEM form


def test_look_alike_names_and_prose_stay_visible(spans):
    visible = {
        "max_tokens": 5,
        "token_count": 7,
        "tokens": ["a", "b"],
        "input_tokens": 3,
        "tokenizer": "bpe",
        "author": "Ann",
        "note": "the bearer of bad news took a risk-assessment-framework-v2 to ASIA on sk-day",
        "query": "https://example.com/?q=weather&page=2",
        "times": "Note: at 12:30, a ratio of 3:1 (max_tokens: 5); see https://example.com/a:b",
        "json": '{"token_count": 3, "secret": null}',
    }
    call_service(visible)
    assert json.loads(recorded(spans, A.GEN_AI_TOOL_CALL_ARGUMENTS)) == {"request": visible}


def test_model_and_dataclass_fields_named_like_secrets_are_masked(spans):
    class Settings(pydantic.BaseModel):
        openai_api_key: str
        max_tokens: int

    @dataclasses.dataclass
    class Login:
        githubToken: str
        user: str

    call_service([Settings(openai_api_key="plantedModelKey", max_tokens=9), Login("plantedDcToken", "ann")])
    assert json.loads(recorded(spans, A.GEN_AI_TOOL_CALL_ARGUMENTS)) == {
        "request": [{"openai_api_key": "***", "max_tokens": 9}, {"githubToken": "***", "user": "ann"}]
    }


def test_named_tuple_fields_named_like_secrets_are_masked(spans):
    # A named tuple is a tuple: it was recorded as a plain list, its api_key field's value in the clear.
    class Login(NamedTuple):
        api_key: str
        user: str

    call_service(Login("plantedTupleKey", "ann"))
    assert json.loads(recorded(spans, A.GEN_AI_TOOL_CALL_ARGUMENTS)) == {"request": ["***", "ann"]}


def test_an_error_quoting_a_secret_in_a_repr_is_masked_in_every_stored_table(tmp_path):
    # A tool's error message quotes its settings as Python prints them: the key reached the span's exception
    # event, its status and the trial's error message.
    from agenteval import evaluate
    from agenteval.dataset import Case, Dataset

    secret = "team-blue-PLANTED-7F3A9C2E"

    @tool
    def fetch(url: str) -> str:
        raise ConnectionError(f"cannot reach {url} with {{'api_key': '{secret}', 'timeout': 5}}")

    def agent(question: str) -> str:
        return fetch("https://api.example.com/v1")

    store = tmp_path / "s"
    case = Case(id="c", input="What is 2 + 2?", expected_output="4")
    experiment = evaluate(agent, Dataset("d", "d(test)", "hash-d", [case]), store=store, attempts=1, progress="none")
    (row,) = Store(store).rows("SELECT error_message FROM trials WHERE experiment_id = ?", [experiment.id])
    assert "{'api_key': '***', 'timeout': 5}" in row["error_message"]
    for table in ("spans", "trials", "scores"):
        text = json.dumps(Store(store).rows(f"SELECT * FROM {table}"), default=str)
        assert secret not in text, table
    for path in store.rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path.relative_to(store)


def test_a_secret_in_a_model_message_is_masked_in_place(spans):
    @llm_call(model="m")
    def chat(messages):
        return "I used key sk-plantedReply0123456789 for that"

    chat([{"role": "user", "content": "my key is sk-plantedMessage0123456789, use it"}])
    (span,) = spans.get_finished_spans()
    assert json.loads(span.attributes[A.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "my key is ***, use it"}]}
    ]
    assert "I used key *** for that" in span.attributes[A.GEN_AI_OUTPUT_MESSAGES]


def test_a_secret_across_the_cut_is_masked_whole(spans):
    configure_capture(max_string=50)
    call_service("x" * 40 + " sk-plantedAcrossTheCut0123456789 " + "y" * 100)
    text = json.loads(recorded(spans, A.GEN_AI_TOOL_CALL_ARGUMENTS))["request"]
    assert "sk-planted" not in text and "sk-" not in text and "more chars" in text


def test_masking_can_be_switched_off(spans):
    configure_capture(mask_secrets=False)
    call_service({"api_key": "plantedShown", "note": "Bearer abc123plantedShown"})
    assert "plantedShown" in recorded(spans, A.GEN_AI_TOOL_CALL_ARGUMENTS)


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("aws_secret_access_key", True),
        ("openaiApiKey", True),
        ("OpenAIApiKey", True),
        ("githubToken", True),
        ("jwt", True),
        ("passphrase", True),
        ("X-Api-Key", True),
        ("x-amz-security-token", True),
        ("proxy-authorization", True),
        ("client.secret", True),
        ("token_count", False),
        ("tokens", False),
        ("maxTokens", False),
        ("aws_access_key_id", False),
        ("keyboard", False),
    ],
)
def test_secret_key_names_in_any_case_style(key, secret):
    assert is_secret_key(key) is secret


def test_short_and_plain_text_is_returned_as_it_is():
    for text in ("", "ok", "sk-1", "What is the weather in Paris?"):
        assert mask_text(text) is text


def test_a_trial_rows_reply_is_masked_and_redacted_as_its_spans_are(tmp_path):
    # The trial row kept the reply as the agent gave it: a secret masked in the spans, and text the user's redactor
    # hid from them, were stored in trials.reply all the same.
    from agenteval import evaluate
    from agenteval.dataset import Case, Dataset

    secret, email = "sk-proj-PLANTEDreplykey0123456789abcdef", "bob@example.com"

    def scrub(attribute: str, value: Any) -> Any:
        return json.loads(json.dumps(value).replace(email, "[email]"))

    configure_capture(redactor=scrub)

    def agent(question: str) -> str:
        return f"Your key is {secret}; write to {email} for help. The answer is 4."

    case = Case(id="c", input="What is 2 + 2?", expected_output="4", max_length=1000)
    store = tmp_path / "s"
    experiment = evaluate(agent, Dataset("d", "d(test)", "hash-d", [case]), store=store, attempts=1, progress="none")
    (row,) = Store(store).rows("SELECT reply, passed FROM trials WHERE experiment_id = ?", [experiment.id])
    assert row == {"reply": "Your key is ***; write to [email] for help. The answer is 4.", "passed": True}
    for path in store.rglob("*.parquet"):
        text = json.dumps(pq.read_table(path).to_pylist(), default=str)
        assert secret not in text and email not in text, path.relative_to(store)
    (length,) = Store(store).rows("SELECT reason FROM scores WHERE scorer = 'reply_length'")
    assert length["reason"].startswith(f"{len(row['reply'])} characters")  # the reply as stored: masked, not cut


# Provider tokens as they appear bare in text (a log line, a reply, an error), under no secret name.
BARE_TOKENS = {
    "hugging face": "hf_PlantedHuggingFaceTokenAbCdEfGhIjKl",
    "gitlab": "glpat-PlantedGitLab_tok-0123",
    "stripe secret": "sk_live_51PlantedStripeSecret0123",
    "stripe restricted": "rk_live_51PlantedStripeRestrict012",
    "stripe test": "sk_test_51PlantedStripeTestKey0123",
    "stripe webhook": "whsec_PlantedStripeWebhookSecret01",
    "npm": "npm_PlantedNpmToken0123456789abcdefghijk",
    "pypi": "pypi-AgEIcHlwaS5vcmcPlantedPyPiToken0123456789abcdefghijABCD",
    "groq": "gsk_PlantedGroqKey0123456789abcdefghijABCDEFGHIJklmnop",
    "xai": "xai-PlantedXaiKey0123456789abcdefghijABCDEFGHIJklmnop",
    "perplexity": "pplx-PlantedPerplexityKey0123456789abcdefghijABCD",
    "replicate": "r8_PlantedReplicateToken0123456789abcd",
    "slack": "xoxb-1234567890-PlantedSlackBot",
    "slack app": "xapp-1-A0PLANTED-1234567890-abcdef0123456789",
    "google": "AIzaSyPlanted-Google_ApiKey0123456789ab",
    "openai": "sk-proj-PlantedOpenAi0123456789",
    "github": "ghp_PlantedGitHubToken0123456789abcd",
    "github fine-grained": "github_pat_11PLANTED0_PlantedGitHubFineGrained0123",
}


@pytest.mark.parametrize("token", BARE_TOKENS.values(), ids=BARE_TOKENS)
@pytest.mark.parametrize("around", ["use {} now", "{}", "(key {}).", '"{}"', "a\n{}\n", "token_{} ok"])
def test_provider_tokens_bare_in_text_are_masked(token, around):
    assert mask_text(around.format(token)) == around.format("***")


ORDINARY_TEXT = [
    "The agent called hf_hub_download and sk_learn, then wrote npm_config_cache to the log.",
    "case-0001 case_id run_2026_12_05 task-live-updates risk-assessment-framework-v2",
    "sha 3f786850e387550fdab836ed7e6dc881de23001b uuid 123e4567-e89b-12d3-a456-426614174000",
    "use the glpat- prefix; gsk_ and hf_ and xai- alone are not tokens; desk_live_demo",
    "sklearn.linear_model.LogisticRegression and xgboost-classifier-with-early-stopping-rounds",
    "the whsec_ prefix, r8_ and pypi-install instructions, not keys: pypi-package-name-with-many-words",
    '{"case_id": "support-billing-refund-0042", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}',
    # "key" names a secret as a URL's query parameter only.
    "The key is to test early; the monkey=banana; sort by key=name; key: value; --key=server.pem",
    '{"key": "service.name", "value": {"stringValue": "shop"}} and {key: "x"}',
    "https://accounts.example.com/o/oauth2/auth?client_id=app.example&scope=email&donkey=1",
    "yay29.notatoken ya29. alone; aQ~b and abc1Q~short",
]


@pytest.mark.parametrize("text", ORDINARY_TEXT)
def test_ordinary_words_ids_and_hashes_stay_as_they_are(text):
    assert mask_text(text) == text


# A quoted value holding an escaped quote or the other kind of quote, as repr, JSON and JSON inside JSON print it.
QUOTED = {
    "escaped double quote": ('api_key="ab\\"cdPLANTED" next', 'api_key="***" next'),
    "other quote in single": ("password='a\"bPLANTED' next", "password='***' next"),
    "other quote in double": ('password="a\'bPLANTED" next', 'password="***" next'),
    "repr of a dict": (repr({"password": "a'b\"cPLANTED", "n": 1}), "{'password': '***', 'n': 1}"),
    "json": (json.dumps({"token": 'x"yPLANTED', "n": 1}), '{"token": "***", "n": 1}'),
    "json with a backslash": (json.dumps({"token": 'x\\"yPLANTED', "n": 1}), '{"token": "***", "n": 1}'),
    "json in json": (json.dumps(json.dumps({"token": 'x"yPLANTED', "n": 1})), json.dumps('{"token": "***", "n": 1}')),
    "json in json, a backslash": (
        json.dumps(json.dumps({"token": 'x\\"yPLANTED', "n": 1})),
        json.dumps('{"token": "***", "n": 1}'),
    ),
    "not closed": ('cut: {"token": "x\\"yPLANTED', 'cut: {"token": "***'),
}


@pytest.mark.parametrize(("text", "masked"), QUOTED.values(), ids=QUOTED)
def test_a_quoted_value_is_masked_whole_whatever_quotes_it_holds(text, masked):
    assert mask_text(text) == masked


# A bare value holding a closing bracket: the rest of the value must not show; a bracket that closes the
# context the name sits in stays.
BARE = {
    "parenthesis inside": ("api_key=abc)defPLANTED next", "api_key=*** next"),
    "square bracket inside": ("token: xyz]PLANTED next", "token: *** next"),
    "brace inside": ("password=a}b{cPLANTED&page=2", "password=***&page=2"),
    "closer at the end, nothing opened": ("password=hunter2PLANTED)", "password=***"),
    "backslash inside": ("secret=ab\\cdPLANTED next", "secret=*** next"),
    "call": ("Settings(api_key=abcPLANTED)", "Settings(api_key=***)"),
    "call with more": ("f(password=hunter2PLANTED, user=ann)", "f(password=***, user=ann)"),
    "list": ("[token: abcPLANTED]", "[token: ***]"),
    "flow mapping": ("{token: abcPLANTED}, {n: 1}", "{token: ***}, {n: 1}"),
    "nested": ("g(f(token=abcPLANTED))", "g(f(token=***))"),
}


@pytest.mark.parametrize(("text", "masked"), BARE.values(), ids=BARE)
def test_a_bare_value_is_masked_whole_and_a_closing_bracket_stays(text, masked):
    assert mask_text(text) == masked


def test_a_shape_inside_a_longer_word_does_not_hide_a_real_one_after_it():
    # A look-alike inside a word was left alone, but its match ran on: a PEM block with no END line swallowed the
    # text to its end, the real private key after it included.
    text = f"x0-----BEGIN PRIVATE KEY-----cut\nthen {PEM}"
    assert "plantedPemBody" not in mask_text(text)
    assert mask_text("id ASIAPLANTED234567890 and xASIAPLANTED234567890") == "id *** and xASIAPLANTED234567890"


def test_names_read_out_of_long_text_are_not_kept_after_masking():
    """Whether a name is a secret's was remembered for 4,096 names of any length: names read out of untrusted text
    (a span's value, a collected request) stayed in memory, up to gigabytes of someone else's text."""
    import gc
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(10):  # 10 distinct names of 300 KB each, each ending like a secret's before a separator
            text = "x" * n + "a" * 300_000 + "token=value"  # one word: not a secret's name
            assert mask_text(text) == text
            del text
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1_000_000, kept  # 3 MB were kept


# About 1M characters each, built against one of the newer patterns, with one secret at the end that must be masked.
# Masking reads these in well under a second (measured: 10-330 ms each); a pattern gone quadratic takes minutes,
# and the test then shows as a hang rather than a pass.
HOSTILE = {
    "google token prefixes": "ya29." * 200_000,
    "a google token's characters": "ya29." + "a" * 1_000_000,
    "entra secret hints": "aaa1Q~" * 170_000,
    "entra secret characters before a hint": "a" * 1_000_000 + "1Q~",
    "aws key ids and separators": ("AKIA" + "A" * 16 + " ,:;") * 40_000,
    "aws key ids with a secret one short": ("AKIA" + "B" * 16 + " " + "c" * 39 + " ") * 16_000,
    "query keys": "?key=" * 200_000,
    "form keys with no value": "&key=&" * 170_000,
    "form codes": "&code=" * 170_000,
    "google client secret prefixes": "GOCSPX" * 170_000,
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE)
def test_text_made_to_slow_the_newer_patterns_down_is_masked(text):
    masked = mask_text(text + " then ?key=PLANTEDlast")
    assert masked.endswith("?key=***") or masked.endswith(MASK), masked[-60:]
    assert "PLANTEDlast" not in masked


# URL-encoded text: a URL inside another's query, a form body, a header line put into a URL. Each was left as it was.
ENCODED = {
    "a signed url inside a query": (
        "https://login.example/authorize?client_id=app&redirect_uri=https%3A%2F%2Fa.blob.core.windows.net%2Fc%2Fb"
        "%3Fsv%3D2022%26sig%3DPLANTEDsas%252Bx%26se%3D2025",
        "https://login.example/authorize?client_id=app&redirect_uri=https%3A%2F%2Fa.blob.core.windows.net%2Fc%2Fb"
        "%3Fsv%3D2022%26sig%3D***%26se%3D2025",
    ),
    "lower-case escapes": ("next=%2Fcb%3fsig%3dPLANTEDlow%26a%3d1", "next=%2Fcb%3fsig%3d***%26a%3d1"),
    "an encoded character in the name": ("GET /v1?api%5Fkey=PLANTED1234&page=2", "GET /v1?api%5Fkey=***&page=2"),
    "a key parameter inside a query": ("q=%3Fkey%3DPLANTEDgoog%26alt%3Djson", "q=%3Fkey%3D***%26alt%3Djson"),
    "a header line, %20": ("curl -H X-Api-Key%3A%20PLANTEDhdr42 x", "curl -H X-Api-Key%3A%20*** x"),
    "a header line, + and a scheme": ("h=Authorization%3A+Bearer+PLANTEDbr1&x=1", "h=Authorization%3A+Bearer+***&x=1"),
    "a quoted value": ("body=%7B%22token%22%3A%20%22PLANTEDq%22%7D", "body=%7B%22token%22%3A%20%22***%22%7D"),
    "user and password": (
        "next=https%3A%2F%2Fbob%3APLANTEDpw%40db.example%2Fx",
        "next=https%3A%2F%2Fbob%3A***%40db.example%2Fx",
    ),
    # Encoded twice or three times (%25 is an encoded "%"): a URL in a query, and that query in another.
    "a name encoded twice": ("GET /v1?api%255Fkey=PLANTED1234&page=2", "GET /v1?api%255Fkey=***&page=2"),
    "a separator encoded twice": (
        "next=%2Fcb%3Ftoken%253DPLANTED2%2526a%253D1",
        "next=%2Fcb%3Ftoken%253D***%2526a%253D1",
    ),
    "a separator encoded three times": ("q=token%25253DPLANTED3%252526x", "q=token%25253D***%252526x"),
    "user and password encoded twice": (
        "u=https%253A%252F%252Fbob%253APLANTEDpw%2540db.example",
        "u=https%253A%252F%252Fbob%253A***%2540db.example",
    ),
}


@pytest.mark.parametrize(("text", "masked"), ENCODED.values(), ids=ENCODED)
def test_secrets_in_url_encoded_text_are_masked_in_place(text, masked):
    assert mask_text(text) == masked


def test_url_encoded_text_with_no_secret_stays_as_it_is():
    for text in (
        "next=https%3A%2F%2Fshop.example%2Fcart%3Fpage%3D2%26sort%3Dprice",
        "/files/a%20b/report%2Dfinal.pdf at 100%25 and 12%3A30",
        "q=max%5Ftokens%3D200%26token%5Fcount%3D12",
        "discount%253D50%2525 and name%253Dtoken%2526max%255Ftokens%253D12%2526token%25255Fcount%25253D3",
    ):
        assert mask_text(text) == text


def test_an_encoded_secret_a_decorator_captures_is_masked(spans):
    """The capture's cheap pre-check (no ``=`` or ``:``: nothing to mask) let ``sig%3D...`` through unscanned."""
    call_service("https%3A%2F%2Fh%2Fb%3Fsig%3DPLANTEDcaptured")
    assert "PLANTED" not in recorded(spans, A.GEN_AI_TOOL_CALL_ARGUMENTS)


def test_long_encoded_text_is_masked_in_time_that_grows_with_its_length():
    masked = mask_text("%3D%26" * 200_000 + "a%5F" * 200_000 + " then sig%3DPLANTEDlast")
    assert masked.endswith("sig%3D***")


def test_an_encoded_secret_in_another_instrumentations_span_is_stored_masked(tmp_path):
    """The store's exporter scans a batch's text joined once: a batch whose one secret is URL-encoded is masked."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from agenteval_exporters import ParquetSpanExporter

    exporter = ParquetSpanExporter(tmp_path / "store")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("opentelemetry.instrumentation.httpx")
    for n in range(20):
        with tracer.start_as_current_span("GET") as span:
            span.set_attribute("url.full", f"https://shop.example/cart?page={n}")
    with tracer.start_as_current_span("GET") as span:
        span.set_attribute("url.full", "https://login.example/cb?next=%2Fb%3Fsig%3DPLANTEDbatch%26se%3D1")
    provider.shutdown()
    urls = [json.loads(r["attributes"])["url.full"] for r in Store(tmp_path / "store").rows("SELECT * FROM spans")]
    assert len(urls) == 21 and "https://login.example/cb?next=%2Fb%3Fsig%3D***%26se%3D1" in urls


def test_secrets_encoded_twice_in_other_instrumentations_spans_are_not_in_the_parquet_file(tmp_path):
    """Names and separators encoded twice (``api%255Fkey=``, ``token%253D``: ``%25`` is an encoded "%") were decoded
    once, read as no secret's name, and their values were stored as they came. Real spans of another
    instrumentation go through the store's exporter; the Parquet file written holds none of the secrets."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    from agenteval_exporters import ParquetSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(tmp_path / "store")))
    tracer = provider.get_tracer("opentelemetry.instrumentation.httpx")
    with tracer.start_as_current_span("GET") as span:
        span.set_attribute("url.full", "https://login.example/cb?next=%2Fv1%3Fapi%255Fkey%253DPLANTEDname%2526p%253D2")
        span.set_attribute("url.query", "q=token%25253DPLANTEDthrice%252526x")
        span.add_event("redirect", {"location": "https://h.example/?u=%2Fb%3Fsig%253DPLANTEDevent"})
        span.set_status(Status(StatusCode.ERROR, "refused next=%2Fcb%3Ftoken%253DPLANTEDstatus%2526a%253D1"))
    provider.shutdown()
    (written,) = (tmp_path / "store" / "spans").rglob("*.parquet")
    stored = json.dumps(pq.read_table(written).to_pylist(), default=str)
    assert "PLANTED" not in stored
    assert "api%255Fkey%253D***%2526p%253D2" in stored


def test_every_secret_name_is_still_found_past_the_quick_check():
    """Keys are split into words only when one search finds a piece of a secret's name in them (splitting cost
    12 s of CPU for a request of 1.5 million distinct keys): every secret last word and pair, in each case style,
    must still be found."""
    from agenteval_instrumentation.masking import SECRET_LAST_PAIRS, SECRET_LAST_WORDS, is_secret_key

    for word in SECRET_LAST_WORDS:
        assert is_secret_key(word) and is_secret_key(f"x.{word.upper()}"), word
    for first, second in SECRET_LAST_PAIRS:
        for key in (f"{first}_{second}", f"X-{first.title()}-{second.title()}", f"my{first.title()}{second.title()}"):
            assert is_secret_key(key), key
    assert not is_secret_key("gen_ai.usage.input_tokens") and not is_secret_key("k" * 300)
