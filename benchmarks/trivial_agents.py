"""The sync/async twins the harness benchmark compares: the same trivial agent as a plain function and as a
coroutine, so the difference is only how the runner calls it."""


def answer(question: str) -> str:
    return "42"


async def answer_async(question: str) -> str:
    return "42"
