"""Span attribute names: the OpenTelemetry GenAI semantic conventions and agenteval's own.

The GenAI names follow the conventions' own repository, ``open-telemetry/semantic-conventions-genai``, at
revision 002c8a6 of its main branch (it has no tagged release yet); names older releases and other
instrumentations use are read too (see ``agenteval_exporters.conventions``).

Every module that reads or writes a span attribute takes its name from here.
"""

# --- OpenTelemetry GenAI semantic conventions -------------------------------------------------

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
"""The kind of GenAI operation: ``chat``, ``execute_tool``, ``invoke_agent``, ``retrieval``, ..."""

GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
"""The model provider, e.g. ``openai``, ``anthropic`` (replaces the older ``gen_ai.system``)."""

GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
"""The model the caller asked for."""

GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
"""The model that answered, as reported by the provider."""

GEN_AI_RESPONSE_ID = "gen_ai.response.id"
"""The provider's id for the response."""

GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
"""Why the model stopped, one entry per choice (``stop``, ``length``, ``tool_calls``, ...)."""

GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
"""Tokens in the prompt."""

GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
"""Tokens in the completion."""

GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
"""The messages sent to a model or agent, as JSON text."""

GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
"""The messages a model or agent returned, as JSON text."""

GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
"""Instructions given apart from the messages (Anthropic's ``system``, the Responses API's ``instructions``),
as JSON text: a list of parts."""

GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
"""The tools offered to the model, as JSON text: ``[{"type": "function", "name", "description", "parameters"}]``."""

GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
"""The sampling temperature asked for."""

GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
"""The top-p sampling setting asked for."""

GEN_AI_REQUEST_TOP_K = "gen_ai.request.top_k"
"""The top-k sampling setting asked for."""

GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
"""The most tokens the model may generate (``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``)."""

GEN_AI_REQUEST_FREQUENCY_PENALTY = "gen_ai.request.frequency_penalty"
"""The frequency penalty asked for."""

GEN_AI_REQUEST_PRESENCE_PENALTY = "gen_ai.request.presence_penalty"
"""The presence penalty asked for."""

GEN_AI_REQUEST_SEED = "gen_ai.request.seed"
"""The seed asked for."""

GEN_AI_REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
"""How many choices were asked for (a ``choice_count`` argument)."""

GEN_AI_REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
"""The sequences that stop generation."""

GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
"""Whether the response was asked for as a stream."""

GEN_AI_AGENT_NAME = "gen_ai.agent.name"
"""The name of the agent an ``invoke_agent`` span runs."""

GEN_AI_TOOL_NAME = "gen_ai.tool.name"
"""The name of the tool an ``execute_tool`` span runs."""

GEN_AI_TOOL_DESCRIPTION = "gen_ai.tool.description"
"""The tool's description (the first line of its docstring unless given)."""

GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
"""The tool's type; decorated Python functions are ``function``."""

GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
"""The id the model gave this tool call, when the caller provides one."""

GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
"""The tool's arguments, as JSON text."""

GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
"""The tool's result, as JSON text."""

GEN_AI_RETRIEVAL_QUERY_TEXT = "gen_ai.retrieval.query.text"
"""The text a retrieval searched for."""

GEN_AI_RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"
"""The documents a retrieval returned, in rank order, as JSON text: ``[{"id": ..., "score": ...}]`` (ids and
scores only; the documents' text is not recorded)."""

GEN_AI_EVALUATION_RESULT = "gen_ai.evaluation.result"
"""The name of the event that carries one evaluation of a trial (one scorer's score)."""

GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
"""The evaluation's name: the scorer."""

GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
"""The score, 0 to 1."""

GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
"""The score as a label: ``pass``, ``fail`` or ``error`` for pass/fail scorers, ``scored`` for continuous ones."""

GEN_AI_EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"
"""Why the scorer gave that score."""

ERROR_TYPE = "error.type"
"""The qualified class name of the exception that ended the operation."""

# --- Operation names -----------------------------------------------------------------------

OPERATION_CHAT = "chat"
OPERATION_EXECUTE_TOOL = "execute_tool"
OPERATION_INVOKE_AGENT = "invoke_agent"
OPERATION_RETRIEVAL = "retrieval"

# --- agenteval's own ------------------------------------------------------------------------

EXPERIMENT_ID = "agenteval.experiment.id"
"""The experiment a span belongs to; stamped on every span of a trial."""

CASE_ID = "agenteval.case.id"
"""The dataset case a span's trial answers."""

TRIAL_ID = "agenteval.trial.id"
"""The trial (one attempt at one case) a span belongs to."""

TRIAL_ATTEMPT = "agenteval.trial.attempt"
"""Which attempt at the case the trial is, counting from 1."""

ROLE = "agenteval.role"
"""Who made a span inside a trial when it is not the agent: ``simulated_user`` or ``judge``. Their
model calls never count in the agent's tokens or cost."""

ROLE_JUDGE = "judge"
ROLE_SIMULATED_USER = "simulated_user"

INPUT = "agenteval.input"
"""A retriever's (or other step's) arguments, as JSON text."""

OUTPUT = "agenteval.output"
"""A retriever's (or other step's) return value, as JSON text."""

RETRIEVAL_DOCUMENT_IDS = "agenteval.retrieval.document_ids"
"""Ids of the documents a retrieval returned, in rank order (what scorers read; written beside
:data:`GEN_AI_RETRIEVAL_DOCUMENTS`, and derived from it for spans of other instrumentations)."""

WRAPS_MODEL_CALL = "agenteval.model_call.wraps"
"""True on a model-call span with another model-call span beneath it (an SDK's or another instrumentation's
own span for the same request). Usage is counted once, on the innermost: this span records none, and counts
as no model call of its own."""

DERIVED = "agenteval.derived"
"""On a span of another instrumentation (OpenInference, OpenLLMetry, older GenAI names): the GenAI names the
exporter derived from its attributes and added beside them."""

DROPPED_ATTRIBUTES_COUNT = "agenteval.dropped_attributes_count"
"""On a span (or in an event) ``agenteval collect`` received with more attributes than it keeps: how many it dropped
(the last ones sent), as OTLP's own ``dropped_attributes_count`` would say."""

DROPPED_EVENTS_COUNT = "agenteval.dropped_events_count"
"""On a span ``agenteval collect`` received with more events than it keeps: how many it dropped (the last ones
sent), as OTLP's own ``dropped_events_count`` would say."""

TRIAL_OUTCOME = "agenteval.trial.outcome"
"""On a trial's root span sent over OTLP: ``passed``, ``wrong`` or ``failed``."""

TRIAL_FAILURE_TYPE = "agenteval.trial.failure_type"
"""On a trial's root span sent over OTLP: the failure type, when the trial failed."""

TRIAL_INFRASTRUCTURE = "agenteval.trial.infrastructure"
"""On a trial's root span sent over OTLP: whether its failure was an infrastructure failure."""

STREAM_CHUNKS = "agenteval.stream.chunks"
"""How many chunks a streamed call produced."""

STREAM_FIRST_CHUNK_MS = "agenteval.stream.time_to_first_chunk_ms"
"""Milliseconds from the start of a streamed call to its first chunk."""

STREAM_CLOSED_EARLY = "agenteval.stream.closed_early"
"""True when the consumer stopped a stream before it was exhausted."""

MODEL_RETRIES = "agenteval.model.retries"
"""Requests of an agenteval model call sent again after a 429, a 5xx/529 or a failed connection."""

RATE_LIMIT_WAITS = "agenteval.rate_limit.waits"
"""How many times a model call waited on a rate limit: after a 429, or for a place under the shared per-model
limiter. Set as the waits happen, so a call cut off by the trial's timeout carries it too: that trial is
``timeout_after_rate_limit``."""

RATE_LIMIT_WAIT_MS = "agenteval.rate_limit.wait_ms"
"""Milliseconds a model call spent waiting on rate limits (the waits :data:`RATE_LIMIT_WAITS` counts)."""

MODEL_WAIT_EVENT = "agenteval.model.wait"
"""An event on a model call's span for each wait, with :data:`WAIT_REASON`, :data:`WAIT_SECONDS`,
:data:`WAIT_RETRY_AFTER` and :data:`HTTP_RESPONSE_STATUS_CODE`."""

WAIT_REASON = "agenteval.wait.reason"
"""Why a model call waited: ``rate_limit`` (a 429), ``limiter`` (the shared per-model limiter), ``server_error``
(a 5xx or 529) or ``connection`` (the API could not be reached, or a stream dropped)."""

WAIT_SECONDS = "agenteval.wait.seconds"
"""How long one wait lasted, in seconds."""

WAIT_RETRY_AFTER = "agenteval.wait.retry_after"
"""True when the provider said how long to wait (``Retry-After`` or ``retry-after-ms``) and the wait honoured it."""

HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
"""The HTTP status of the response that made a model call wait (OpenTelemetry's HTTP conventions); on a span that
ended in error, the status the exception carries (an error sent inside a stream: the stream's 200)."""

PROVIDER_ERROR_CODE = "agenteval.provider_error.code"
"""On a span that ended in a provider's error: the error's code (OpenAI's ``context_length_exceeded``, an
OpenAI-compatible server's ``400``). The GenAI conventions name no attribute for it."""

PROVIDER_ERROR_TYPE = "agenteval.provider_error.type"
"""On a span that ended in a provider's error: the error object's type (Anthropic's ``overloaded_error``, OpenAI's
``insufficient_quota``). With the code and the status, what the failure classifier reads of a recorded failure."""

CACHE_HIT = "agenteval.cache.hit"
"""True when a model call's answer came from agenteval's response cache (``--cache``): no request was sent,
and its usage is recorded as zero tokens."""

# --- Instrumentation scopes ------------------------------------------------------------------

RUNNER_SCOPE = "agenteval.runner"
"""The instrumentation scope of the runner's own spans: each trial's root span, the parent of the agent's spans."""
