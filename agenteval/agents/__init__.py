"""Built-in agents: the mock agent, and the reference agent (a model with the dataset's tools)."""

from ._mock import FAILURES, MockAgent, MockProviderError, MockToolError, mock_agent
from ._reference import PROMPT_VERSION, SYSTEM_PROMPT, ReferenceAgent, dataset_tools, reference_agent

__all__ = [
    "FAILURES",
    "PROMPT_VERSION",
    "SYSTEM_PROMPT",
    "MockAgent",
    "MockProviderError",
    "MockToolError",
    "ReferenceAgent",
    "dataset_tools",
    "mock_agent",
    "reference_agent",
]
