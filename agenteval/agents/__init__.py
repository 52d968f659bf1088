"""Built-in agents."""

from .mock import FAILURES, MockAgent, MockProviderError, MockToolError, mock_agent

__all__ = ["FAILURES", "MockAgent", "MockProviderError", "MockToolError", "mock_agent"]
