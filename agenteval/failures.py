"""The path the failure types had before the run's modules moved into :mod:`agenteval.run`; kept so
code written against it keeps working. New code imports from :mod:`agenteval.run`."""

from .run._failures import Failure, InvalidModelOutput, MaxStepsExceeded, ProviderError, register

__all__ = ["Failure", "InvalidModelOutput", "MaxStepsExceeded", "ProviderError", "register"]
