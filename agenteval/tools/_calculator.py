"""A safe calculator: arithmetic parsed with ``ast``, never ``eval``."""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable

from agenteval_instrumentation import tool

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., float]] = {"sqrt": math.sqrt, "abs": abs, "round": round}
MAX_EXPONENT = 100
MAX_LENGTH = 500
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


class CalculatorError(ValueError):
    """The expression is not arithmetic the calculator accepts."""


def evaluate(expression: str) -> float | int:
    """The value of an arithmetic expression: numbers, + - * / // % ** (or ^), parentheses,
    sqrt, abs and round. Thousands separators (1,250) and the signs × ÷ are accepted."""
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(f"expression longer than {MAX_LENGTH} characters")
    text = _THOUSANDS.sub("", expression).replace("×", "*").replace("÷", "/").replace("^", "**")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from exc
    value = _value(tree.body, expression)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _value(node: ast.AST, expression: str) -> float:
    if isinstance(node, ast.Constant) and (type(node.value) is int or type(node.value) is float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand, expression))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left, expression), _value(node.right, expression)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is larger than {MAX_EXPONENT}")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError as exc:
            raise CalculatorError("division by zero") from exc
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*(_value(a, expression) for a in node.args))
    raise CalculatorError(f"unsupported element in {expression!r}: {ast.dump(node)[:60]}")


@tool
def calculator(expression: str) -> float | int:
    """Evaluate an arithmetic expression, e.g. "(1250 - 250) / 4" or "2 ^ 10".

    Args:
        expression: numbers with + - * / // % ^ and parentheses; sqrt(), abs() and round() are allowed.
    """
    return evaluate(expression)
