"""Built-in agents."""

from ._mock import FAILURES, MockAgent, MockProviderError, MockToolError, mock_agent

__all__ = ["FAILURES", "MockAgent", "MockProviderError", "MockToolError", "mock_agent"]
