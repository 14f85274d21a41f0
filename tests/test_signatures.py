"""``inspect.signature`` of every public layer shows its real arguments (what an IDE, ``help()`` and the API
reference show), checked against what the layer itself records: its ``get_config()``."""

from __future__ import annotations

import inspect
from typing import Any

import keras
import pytest

import ste
import ste.larq.layers

MODULES = (ste.layers, ste.quantizers, ste.spiking, ste.larq.layers, ste.qat)
# Values for the arguments that have no default, to build each layer once.
REQUIRED = {
    "units": 3,
    "filters": 2,
    "kernel_size": 3,
    "precision": 1,
    "layer": lambda: keras.layers.Dense(2),
    "layers": lambda: [ste.spiking.SpikingDense(2)],
    "num_heads": 2,
    "key_dim": 4,
    "equation": "ab,bc->ac",
    "output_shape": 3,
    "input_dim": 5,
    "output_dim": 2,
    # TFMOT's quantizers take every argument without a default, as TFMOT's do
    "num_bits": 8,
    "per_axis": False,
    "symmetric": True,
    "narrow_range": False,
    "init_min": 0.0,
    "init_max": 1.0,
    "quantize_config": lambda: ste.qat.QuantizeConfig(),
}
VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
# What every Keras layer's config holds whatever its arguments (keras.layers.Layer's own keywords).
KERAS_KEYS = set(keras.layers.Layer().get_config()) | {"autocast"}


def public_layers() -> list[Any]:
    found: dict[str, type] = {}
    for module in MODULES:
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, keras.layers.Layer):
                found[f"{module.__name__}.{name}"] = value
    return [pytest.param(cls, id=name) for name, cls in found.items()]


def test_the_table_covers_every_kind_of_layer() -> None:
    names = {param.id for param in public_layers()}
    for expected in (
        "ste.spiking.LIF",
        "ste.spiking.ALIFCell",
        "ste.quantizers.Sign",
        "ste.layers.QuantConv2D",
        "ste.larq.layers.QuantDense",
    ):
        assert expected in names


def named(cls: type) -> dict[str, inspect.Parameter]:
    return {name: p for name, p in inspect.signature(cls).parameters.items() if p.kind not in VARIADIC}


def concrete(cls: Any) -> Any:
    """``cls``, or for a base class with abstract methods (``Quantizer``, ``SpikingCell``) a subclass implementing
    only those, and for ``SpikingRNN`` a subclass whose cell is such a subclass of ``SpikingCell``: a layer with the
    base's own arguments."""
    if inspect.isabstract(cls):
        return type(cls.__name__, (cls,), {name: lambda self, *args: None for name in cls.__abstractmethods__})
    if cls is ste.spiking.SpikingRNN:
        return type(cls.__name__, (cls,), {"cell_class": concrete(ste.spiking.SpikingCell)})
    return cls


def build(cls: type) -> keras.layers.Layer:
    arguments = {name: REQUIRED[name] for name, p in named(cls).items() if p.default is inspect.Parameter.empty}
    arguments = {name: value() if callable(value) else value for name, value in arguments.items()}
    return concrete(cls)(**arguments)


@pytest.mark.parametrize("cls", public_layers())
def test_signature_is_not_only_args_and_kwargs(cls: Any) -> None:
    """A layer either names its arguments, or takes only Keras's own (like ``keras.layers.Identity(**kwargs)``)."""
    parameters = inspect.signature(cls).parameters.values()
    assert not any(p.kind is p.VAR_POSITIONAL for p in parameters) or named(cls), inspect.signature(cls)
    if not named(cls):
        assert set(build(cls).get_config()) <= KERAS_KEYS, f"{cls.__name__}{inspect.signature(cls)}"


@pytest.mark.parametrize("cls", public_layers())
def test_signature_is_the_constructors(cls: Any) -> None:
    """inspect shows what ``__init__`` takes (or the forwarding signature a cell declares), never a wrapper's."""
    init = list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self
    expected = list(cls.__signature__.parameters.values()) if hasattr(cls, "__signature__") else init
    assert list(inspect.signature(cls).parameters.values()) == expected


@pytest.mark.parametrize("cls", public_layers())
def test_signature_names_every_configured_argument(cls: Any) -> None:
    """Every argument the layer saves in its config (and so takes back in ``from_config``) is a named parameter."""
    config = build(cls).get_config()
    missing = sorted(set(config) - KERAS_KEYS - set(named(cls)))
    assert not missing, f"{cls.__name__}{inspect.signature(cls)} does not show {missing}"


@pytest.mark.parametrize("cls", public_layers())
def test_signature_defaults_are_the_constructed_values(cls: Any) -> None:
    """A default shown in the signature is the value a layer built without that argument has (scalars only)."""
    config = build(cls).get_config()
    for name, parameter in named(cls).items():
        default, value = parameter.default, config.get(name, inspect.Parameter.empty)
        if type(default) is type(value) and isinstance(default, (bool, int, float, str)):
            assert value == default, f"{cls.__name__}: {name} defaults to {default!r}, a default layer has {value!r}"


@pytest.mark.parametrize("name", ["LIF", "IF", "ALIF", "LIFCell", "IFCell", "ALIFCell"])
def test_spiking_signatures_list_the_neuron_arguments(name: str) -> None:
    parameters = inspect.signature(getattr(ste.spiking, name)).parameters
    assert parameters["threshold"].default == 1.0
    assert parameters["reset"].default == "subtract"
    assert parameters["surrogate"].default == "atan(alpha=2.0)"
    assert parameters["detach_reset"].default is True
    if name.startswith("IF"):
        assert "beta" not in parameters and "learn_beta" not in parameters  # IFCell refuses them
    else:
        assert parameters["beta"].default == 0.9
    if not name.endswith("Cell"):
        assert parameters["return_sequences"].default is True


def test_signature_binds_as_the_constructor_does() -> None:
    """Positional arguments bind as the constructor takes them: LIF(0.5, 2.0) is beta=0.5, threshold=2.0."""
    bound = inspect.signature(ste.spiking.LIF).bind(0.5, 2.0, surrogate="fast_sigmoid")
    layer = ste.spiking.LIF(*bound.args, **bound.kwargs)
    assert (layer.beta, layer.threshold) == (0.5, 2.0)
    with pytest.raises(ste.STEError):
        ste.spiking.IF(beta=0.5)


@pytest.mark.parametrize("cls", public_layers())
def test_signature_defaults_read_as_values(cls: Any) -> None:
    """A default reads as a value in help() and IDEs, never as ``<object object at 0x7f...>``."""
    for name, parameter in named(cls).items():
        assert " at 0x" not in repr(parameter.default), f"{cls.__name__}: {name}={parameter.default!r}"


def test_a_new_neuron_gets_a_complete_signature_by_subclassing() -> None:
    """A cell or layer written later (a new neuron model) shows its own, its base's and the sequence arguments."""

    class GainCell(ste.spiking.LIFCell):
        def __init__(self, beta: float = 0.5, *, gain: float = 2.0, **kwargs: Any) -> None:
            super().__init__(beta, **kwargs)
            self.gain = gain

    class Gain(ste.spiking.SpikingRNN):
        cell_class = GainCell

    class Scaled(ste.spiking.LIF):
        def __init__(self, *args: Any, scale: float = 1.0, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)

    cell = inspect.signature(GainCell).parameters
    assert (
        cell["beta"].default == 0.5 and cell["gain"].default == 2.0 and cell["surrogate"].default == "atan(alpha=2.0)"
    )
    layer = inspect.signature(Gain).parameters
    assert layer["gain"].default == 2.0 and layer["threshold"].default == 1.0 and layer["stateful"].default is False
    scaled = inspect.signature(Scaled).parameters
    assert scaled["scale"].default == 1.0 and scaled["beta"].default == 0.9 and "return_state" in scaled
    assert Gain(gain=3.0).cell.gain == 3.0
