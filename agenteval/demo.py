"""A small decorated agent to show what agenteval records, before any evaluation is set up."""

from __future__ import annotations

import ast
import operator

from agenteval_instrumentation import agent, llm_call, set_llm_response, tool

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


@tool
def calculator(expression: str) -> float:
    """Evaluate an arithmetic expression of numbers and + - * /."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"unsupported expression: {expression!r}")

    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc
    return value(tree.body)


@llm_call(model="demo-model", provider="demo")
def plan(question: str) -> str:
    """A stand-in for a model call: turns the question into an expression."""
    expression = question.removeprefix("What is ").rstrip("?")
    set_llm_response(input_tokens=len(question.split()) + 12, output_tokens=4, finish_reasons="tool_calls")
    return expression


@agent(name="demo-agent")
def demo_agent(question: str) -> str:
    """Answer an arithmetic question with one model call and one tool call."""
    result = calculator(plan(question))
    return f"{result:g}"
