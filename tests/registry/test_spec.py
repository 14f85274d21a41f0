"""Spec strings are parsed with ast, literals only; nothing is ever evaluated."""

from __future__ import annotations

import pytest

import ste
from ste.registry import parse_spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("identity", ("identity", (), {})),
        ("  sigmoid_surrogate(beta=4)  ", ("sigmoid_surrogate", (), {"beta": 4})),
        ("straight_through(clip=None)", ("straight_through", (), {"clip": None})),
        ("straight_through(0.5)", ("straight_through", (0.5,), {})),
        (
            "f(a=-1.5, b=+2, c='x', d=True, e=(1, 2), g=[0.5])",
            ("f", (), {"a": -1.5, "b": 2, "c": "x", "d": True, "e": (1, 2), "g": [0.5]}),
        ),
    ],
)
def test_valid_specs(spec: str, expected: tuple[object, ...]) -> None:
    assert parse_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("__import__('os').system('true')", "only a plain registered name may be called"),
        ("sigmoid_surrogate(beta=__import__('os'))", "calls inside arguments"),
        ("os.system", "Attribute"),
        ("sigmoid_surrogate(beta=x)", "bare names"),
        ("sigmoid_surrogate(beta=lambda: 1)", "lambdas"),
        ("sigmoid_surrogate(beta=f'{1}')", "f-strings"),
        ("sigmoid_surrogate(beta=1+1)", "arithmetic"),
        ("sigmoid_surrogate(beta=-x)", "sign may only precede a number"),
        ("sigmoid_surrogate(*[1])", r"\*args"),
        ("sigmoid_surrogate(**{'beta': 1})", r"\*\*kwargs"),
        ("sigmoid_surrogate(beta=1, beta=2)", "syntax|given twice"),
        ("sigmoid_surrogate(", "syntax"),
        ("", "empty"),
        ("a" * 600, "characters long"),
        ("f(x=" + "[" * 150 + "]" * 150 + ")", "syntax|nested"),
        ("f(x=" + "[" * 5 + "]" * 5 + ")", "nested too deeply"),
        ("1 + 2", "BinOp"),
        ("f(b'x')", "bytes"),
    ],
)
def test_invalid_specs_raise_spec_error(spec: str, reason: str) -> None:
    with pytest.raises(ste.errors.SpecError, match=reason):
        parse_spec(spec)


def test_non_string_spec() -> None:
    with pytest.raises(ste.errors.SpecError, match="must be a string"):
        parse_spec(3)  # type: ignore[arg-type]
