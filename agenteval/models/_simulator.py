"""A simulated user played by a model: it is given the case's ``simulated_user`` description and the conversation,
writes the user's next message after each reply, and ends the conversation once the goal is met or clearly
cannot be, by answering :data:`DONE`; an empty answer is the simulator's failure, not an end. The runner bounds
it with the case's ``max_turns`` and marks its spans ``simulated_user``."""

from __future__ import annotations

from ._model import Model

PROMPT_VERSION = "1"
DONE = "[DONE]"
SYSTEM_PROMPT = f"""You play a user talking to an AI assistant, to test the assistant. Stay in character: the \
description below says who you are and what you want. Write only the user's next message: short, natural, one \
message, never the assistant's part. Reveal details only when the assistant needs them.
When your goal has been met, or it clearly cannot be met, reply with exactly {DONE} and nothing else."""


class EmptyUserMessage(RuntimeError):
    """The simulated user's model answered with neither a message nor :data:`DONE`: the trial's
    ``simulator_error``, not the end of the conversation (which only :data:`DONE` says)."""


class ModelUserSimulator:
    """``simulator(goal, messages)`` for ``evaluate(user_simulator=...)``: the next user message, or None to end."""

    def __init__(self, model: Model) -> None:
        self.model = model

    async def __call__(self, goal: str, messages: list[dict[str, str]]) -> str | None:
        transcript = "\n".join(f"{m['role'].upper()}: {m['content']}" for m in messages)
        prompt = (
            f"Who you are and what you want:\n{goal}\n\nThe conversation so far:\n{transcript}\n\n"
            f"Write your next message as the user, or {DONE}."
        )
        response = await self.model.complete(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
        )
        text = response.text.strip()
        if DONE in text:
            return None
        if not text:  # a refusal, a content filter, a tool call, a cut answer: not a user who is done
            raise EmptyUserMessage(
                f"{self.model.name} wrote an empty message (finish reason {response.finish_reason}) instead of the "
                f"user's next message or {DONE}"
            )
        return text

    @property
    def agenteval_config(self) -> dict[str, object]:
        return {**self.model.settings(), "prompt_version": PROMPT_VERSION}
