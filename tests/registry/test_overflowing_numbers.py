"""Numbers too large for a float, non-finite clip values and unknown keywords give typed ste errors (issue 11,
"unclear errors"), wherever they enter: a spec string, a keyword, ``from_config``, a quantizer or layer argument,
a constraint, the command line. Never a raw ``OverflowError`` or ``TypeError``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import keras
import pytest

import ste
from ste._tools._cli import main

HUGE = int("9" * 400)  # float(HUGE) raises OverflowError
SPEC = "sigmoid_surrogate(beta=" + "9" * 400 + ")"

ENTRY_POINTS: dict[str, Callable[[], Any]] = {
    "spec string": lambda: ste.registry.get(SPEC),
    "keyword": lambda: ste.registry.get("sigmoid_surrogate", beta=HUGE),
    "class": lambda: ste.registry.SigmoidSurrogate(beta=HUGE),
    "from_config": lambda: ste.registry.get({"name": "sigmoid_surrogate", "params": {"beta": HUGE}}),
    "op": lambda: ste.forward(abs).backward(SPEC),
    "quantizer surrogate": lambda: ste.quantizers.Sign(surrogate=SPEC),
    "quantizer spec": lambda: ste.quantizers.get("swish_sign(beta=" + "9" * 400 + ")"),
    "quantizer argument": lambda: ste.larq.quantizers.SwishSign(beta=HUGE),
    "quantizer clip": lambda: ste.larq.quantizers.SteSign(clip_value=HUGE),
    "uniform range": lambda: ste.quantizers.Uniform(bits=4, min=-1.0, max=HUGE),
    "layer argument": lambda: ste.layers.QuantDense(2, input_quantizer="ste_sign(clip_value=" + "9" * 400 + ")"),
    "constraint spec": lambda: ste.constraints.get("weight_clip(clip_value=" + "9" * 400 + ")"),
    "constraint argument": lambda: ste.constraints.WeightClip(HUGE),
}


@pytest.mark.parametrize("where", list(ENTRY_POINTS))
def test_an_integer_too_large_for_a_float_is_a_typed_error(where: str) -> None:
    with pytest.raises(ste.STEError) as info:
        ENTRY_POINTS[where]()
    assert isinstance(info.value, (ste.errors.ParameterError, ste.errors.SpecError))
    assert len(str(info.value)) < 1000  # the 400 digits are abbreviated


def test_the_command_line_reports_it_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["show", SPEC])
    captured = capsys.readouterr()
    assert status != 0 and "too large for a float" in captured.err
    assert "OverflowError" not in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize("clip", [1e309, float("inf"), float("nan"), -1.0, 0.0, True, "1"])
def test_weight_clip_refuses_non_finite_and_non_positive(clip: Any) -> None:
    with pytest.raises(ste.errors.ParameterError, match="clip_value"):
        ste.constraints.WeightClip(clip)
    with pytest.raises(ste.errors.ParameterError, match="clip_value"):
        ste.constraints.WeightClip.from_config({"clip_value": clip})


def _renamed_keyword(constraint: Any, old: str, new: str) -> Any:
    return json.loads(json.dumps(keras.constraints.serialize(constraint)).replace(old, new))


@pytest.mark.parametrize(
    "make",
    [
        lambda: ste.constraints.get("weight_clip(foo=1)"),
        lambda: ste.constraints.weight_clip(foo=1),  # the direct call too (was Python's raw TypeError)
        lambda: ste.constraints.WeightClip.from_config({"clip_value": 1.0, "foo": 1}),
        lambda: keras.constraints.deserialize(_renamed_keyword(ste.constraints.WeightClip(0.5), "clip_value", "foo")),
    ],
    ids=["spec", "direct", "from_config", "keras_deserialize"],
)
def test_weight_clip_with_an_unknown_keyword_names_it(make: Callable[[], Any]) -> None:
    with pytest.raises(ste.errors.ParameterError, match="foo"):
        make()


@pytest.mark.parametrize(
    ("spec", "keyword"),
    [("sigmoid_surrogate(bta=2.0)", "bta"), ("sign(surogate='identity')", "surogate"), ("dorefa(bit=2)", "bit")],
)
def test_an_unknown_keyword_in_a_spec_is_named(spec: str, keyword: str) -> None:
    get = ste.registry.get if spec.startswith("sigmoid") else ste.quantizers.get
    with pytest.raises(ste.errors.ParameterError, match=keyword):
        get(spec)
