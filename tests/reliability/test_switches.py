"""Every boolean argument of the public API is refused unless it is a real bool.

``bool("no")`` is True: a switch read with ``bool()`` silently inverts what the user wrote. The walk below finds
every public class and function whose signature has a parameter with a bool default and passes ``"no"`` (and ``1``)
to each: each must raise :class:`ste.errors.ParameterError` naming the argument. numpy bools are accepted.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ste

MODULES = [
    "ste",
    "ste.layers",
    "ste.quantizers",
    "ste.optimizers",
    "ste.callbacks",
    "ste.metrics",
    "ste.spiking",
    "ste.constraints",
    "ste.registry",
    "ste.activations",
    "ste.larq",
    "ste.larq.layers",
    "ste.larq.quantizers",
    "ste.larq.optimizers",
    "ste.larq.callbacks",
    "ste.larq.metrics",
    "ste.larq.models",
    "ste.larq.math",
]

#: Values for the required parameters of the public callables (the walk fails on a new name missing here).
REQUIRED: dict[str, Any] = {
    "units": 2,
    "filters": 2,
    "kernel_size": 3,
    "name": "no_such_entry_for_the_switch_test",
    "model": None,
    "x": np.zeros((2, 3), np.float32),
    "steps": 2,
    "y_true": np.zeros((2,), np.int32),
    "spikes": np.zeros((2, 3, 4), np.float32),
    "backup_dir": "never_written_by_the_switch_test",  # refused before any file is written
    "weight": np.zeros((2,), np.float32),
    "layers": [ste.spiking.SpikingDense(2)],  # ste.spiking.Fused's stack
}


def _public() -> Iterator[tuple[str, Callable[..., Any]]]:
    seen: set[int] = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name, None)
            if not callable(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            yield f"{module_name}.{name}", obj


def _cases() -> list[tuple[str, Callable[..., Any], str]]:
    cases = []
    for label, obj in _public():
        try:
            signature = inspect.signature(obj)
        except (TypeError, ValueError):
            continue
        for parameter in signature.parameters.values():
            if isinstance(parameter.default, bool):
                cases.append((label, obj, parameter.name))
    return cases


CASES = _cases()


def _call(obj: Callable[..., Any], switch: str, value: Any) -> Any:
    signature = inspect.signature(obj)
    args, kwargs = [], {}
    for parameter in signature.parameters.values():
        if parameter.default is not inspect.Parameter.empty or parameter.kind in (
            parameter.VAR_POSITIONAL,
            parameter.VAR_KEYWORD,
        ):
            continue
        assert parameter.name in REQUIRED, f"{obj!r}: add a value for its required {parameter.name!r} to REQUIRED"
        if parameter.kind is parameter.POSITIONAL_ONLY:
            args.append(REQUIRED[parameter.name])
        else:
            kwargs[parameter.name] = REQUIRED[parameter.name]
    kwargs[switch] = value
    return _concrete(obj)(*args, **kwargs)


def _concrete(obj: Any) -> Any:
    """``obj``, or for a base class with abstract methods (``SpikingCell``) a subclass implementing only those, and
    for ``SpikingRNN`` a subclass whose cell is such a subclass: its own switches are checked by its ``__init__``."""
    if inspect.isabstract(obj):
        return type(obj.__name__, (obj,), {name: lambda self, *args: None for name in obj.__abstractmethods__})
    if obj is ste.spiking.SpikingRNN:
        return type(obj.__name__, (obj,), {"cell_class": _concrete(ste.spiking.SpikingCell)})
    return obj


def test_the_walk_finds_the_switches_of_quantizers_layers_and_tools():
    found = {(label.rsplit(".", 1)[-1], switch) for label, _, switch in CASES}
    for expected in [
        ("LSQ", "signed"),
        ("QuantDense", "use_bias"),
        ("BatchNormalization", "center"),
        ("summary", "include_macs"),
    ]:
        assert expected in found, expected
    assert len(CASES) > 40


@pytest.mark.parametrize("value", ["no", 1, None], ids=["str", "int", "None"])
@pytest.mark.parametrize(("label", "obj", "switch"), CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_a_non_bool_switch_is_refused(label, obj, switch, value):
    if switch == "learn_surrogate" and value is None:
        pytest.skip("learn_surrogate also takes parameter names; None means none of them")
    with pytest.raises(ste.errors.ParameterError, match=rf"{switch}(=.*names| must be True or False)"):
        _call(obj, switch, value)


@pytest.mark.parametrize(
    ("make", "switch"),
    [
        (lambda v: ste.spiking.LIF(units=4, detach_reset=v), "detach_reset"),
        (lambda v: ste.spiking.LIF(units=4, learn_beta=v), "learn_beta"),
        (lambda v: ste.spiking.LIF(units=4, learn_threshold=v), "learn_threshold"),
        (lambda v: ste.spiking.IF(units=4, detach_reset=v), "detach_reset"),
        (lambda v: ste.spiking.ALIF(units=4, learn_beta=v), "learn_beta"),
        (lambda v: ste.spiking.LIFCell(units=4, detach_reset=v), "detach_reset"),
        (lambda v: ste.quantizers.LSQ(sharded=v), "sharded"),
        (
            lambda v: ste.larq.quantizers.ste_tern(np.zeros(3, np.float32), ternary_weight_networks=v),
            "ternary_weight_networks",
        ),
        (lambda v: ste.registry.register("switch_test", lambda x: x, replace=v), "replace"),
        (lambda v: ste.spiking.register_neuron("switch_test", replace=v), "replace"),
        (lambda v: ste.qat.register_scheme("switch_test", replace=v), "replace"),
        (lambda v: ste.sparsity.register_schedule("switch_test", replace=v), "replace"),
        (lambda v: ste.clustering.register_init("switch_test", replace=v), "replace"),
    ],
)
def test_switches_passed_through_kwargs_are_refused_too(make, switch):
    with pytest.raises(ste.errors.ParameterError, match=rf"{switch} must be True or False.*'no'"):
        make("no")


def test_numpy_bools_are_accepted_as_bools():
    layer = ste.spiking.LIF(units=4, detach_reset=np.bool_(False), learn_beta=np.True_)
    assert layer.cell.detach_reset is False and layer.cell.learn_beta is True
    assert ste.quantizers.LSQ(signed=np.False_).signed is False
    dense = ste.layers.QuantDense(3, use_bias=np.False_)
    dense.build((None, 2))
    assert dense.bias is None
