""":class:`QuantizeWrapper`: a layer quantized by the quantizers its :class:`ste.qat.QuantizeConfig` carries (TFMOT's
``QuantizeWrapperV2``).

The config is asked once, when the wrapper is built, for the layer's weights and activations to quantize and for its
output quantizers (TFMOT's ``get_weights_and_quantizers``, ``get_activations_and_quantizers``,
``get_output_quantizers``). Every quantizer it returns is copied (``from_config(get_config())``), so that each use
has its own state (a moving range), as TFMOT's ``build`` gives each use its own variables.

* Weights: in each call, every weight the config names is read as its quantized value while the layer runs
  (``keras.StatelessScope``), whichever attribute or sub-layer reads it. Keras 3's Dense and convolution kernels are
  read-only properties, so TFMOT's ``set_quantize_weights`` (``layer.kernel = quantize_weights[0]``) cannot run on
  them; it is not called. Variable updates inside the layer (a batch norm's moving statistics) are applied after
  the call, and its losses are added to the wrapper.
* Activations: each becomes a :class:`QuantizeAwareActivation`, handed once to the config's
  ``set_quantize_activations`` (which sets it on the layer, ``layer.activation = quantize_activations[0]``).
  As TFMOT's: softmax, sigmoid and tanh are quantized before they run (TFLite's kernels fix their output range);
  linear, ReLU, ReLU6 and swish/SiLU after; GELU both. Other activations raise :class:`ste.errors.ParameterError`.
* Outputs: the output quantizers, one per output.

What the config returns is checked when the wrapper is built, before any quantizer is built or any activation is
set, as TFMOT's interface defines it: ``get_weights_and_quantizers`` and ``get_activations_and_quantizers`` return a
list (or tuple) of (weight variable of the layer, quantizer) and (activation function, quantizer) pairs, and
``get_output_quantizers`` a list (or tuple) of quantizers, at most one per output. A quantizer is a
:class:`ste.quantizers.Quantizer` (ste's quantizers, and ste.qat's: TFMOT's four, ``WeightFakeQuant``,
``ActivationFakeQuant``): it keeps its input's shape and runs in ste's forward pass. Anything else (``None``, a bare
weight, one pair not in a list, one quantizer not in a list, a quantizer name, a TFMOT quantizer object, a plain Keras
layer such as ``Dense``, which would change the output) raises :class:`ste.errors.ParameterTypeError` naming the
config's class, the method, what it returned and the fix. Empty lists are valid (TFMOT's ``NoOpQuantizeConfig``), but
a config that quantizes nothing at all (no weight, activation or output quantizer) on a layer with weights warns when
the wrapper is built: the layer would stay float inside a wrapper that looks quantized, and TFLite would keep it float.
A warning rather than an error, because keeping a layer float is a legitimate choice (TFMOT's ``NoOpQuantizeConfig``
makes it); ``ste.qat.QuantizeConfig(float=True)`` makes it without the warning.
"""

from __future__ import annotations

import warnings
from typing import Any

import keras
import tensorflow as tf

from .._keras._stateless import call_with_values
from .._patches import apply as apply_patches
from ..errors import ParameterError, ParameterTypeError
from ..quantizers import Quantizer

__all__ = ["QuantizeAwareActivation", "QuantizeWrapper"]

_PRE = frozenset({"softmax", "sigmoid", "tanh", "gelu"})
_POST = frozenset({"linear", "relu", "relu6", "swish", "silu", "gelu"})


_WEIGHT_EXAMPLE = (
    "[(layer.kernel, ste.qat.LastValueQuantizer(num_bits=8, per_axis=False, symmetric=True, narrow_range=True))]"
)
_ACTIVATION_EXAMPLE = (
    "[(layer.activation, ste.qat.MovingAverageQuantizer(num_bits=8, per_axis=False, symmetric=False, "
    "narrow_range=False))]"
)
_OUTPUT_EXAMPLE = "[ste.qat.MovingAverageQuantizer(num_bits=8, per_axis=False, symmetric=False, narrow_range=False)]"


def _shown(value: Any) -> str:
    """What a config returned, short: a variable by its path and shape, a layer by its class, else its repr."""
    if isinstance(value, (keras.Variable, tf.Variable)):
        return f"the variable '{getattr(value, 'path', value.name)}' (shape {tuple(value.shape)})"
    if isinstance(value, keras.layers.Layer):
        return f"a {type(value).__name__} layer '{value.name}'"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_shown(item) for item in value[:4]) + (", ..." if len(value) > 4 else "")
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def _is_pair(item: Any) -> bool:
    return isinstance(item, (list, tuple)) and len(item) == 2


def _pairs(returned: Any, where: str, what: str, example: str) -> list[tuple[Any, Any]]:
    """The (thing, quantizer) pairs a config's ``get_*_and_quantizers`` returned, or a ParameterTypeError."""
    expected = f"expected a list of ({what}, quantizer) pairs, e.g. {example} ([] for none)"
    if not isinstance(returned, (list, tuple)):
        raise ParameterTypeError(
            f"{where} returned {_shown(returned)}; {expected}. Fix: return such a list"
            + (" (a method that returns nothing returns None)." if returned is None else ".")
        )
    if _is_pair(returned) and not _is_pair(returned[0]) and not isinstance(returned[1], (keras.Variable, list, tuple)):
        raise ParameterTypeError(
            f"{where} returned one pair, {_shown(returned)}, not a list of pairs; {expected}. Fix: put the pair in "
            f"a list: [({what}, quantizer)]."
        )
    for item in returned:
        if not _is_pair(item):
            raise ParameterTypeError(
                f"{where} returned {_shown(returned)}, whose item {_shown(item)} is not a ({what}, quantizer) pair; "
                f"{expected}. Fix: return a list of 2-tuples."
            )
    return [(thing, quantizer) for thing, quantizer in returned]


def _output_list(returned: Any, where: str) -> list[Any]:
    expected = f"expected a list of quantizers, one per output of the layer, e.g. {_OUTPUT_EXAMPLE} ([] for none)"
    if isinstance(returned, (list, tuple)):
        return list(returned)
    fix = "put it in a list: [quantizer]" if isinstance(returned, Quantizer) else "return such a list"
    raise ParameterTypeError(f"{where} returned {_shown(returned)}; {expected}. Fix: {fix}.")


def _check_quantizer(value: Any, where: str) -> Quantizer:
    """``value`` if it is a quantizer, else a ParameterTypeError saying what it is and what to return instead."""
    if isinstance(value, Quantizer):
        return value
    fix = (
        "return a ste.quantizers.Quantizer: one of ste.qat's (LastValueQuantizer, MovingAverageQuantizer, "
        "AllValuesQuantizer, FixedQuantizer, WeightFakeQuant, ActivationFakeQuant) or of ste.quantizers"
    )
    if isinstance(value, str):
        why = "a quantizer name, not a quantizer"
        fix += f", e.g. ste.quantizers.get({value!r})"
    elif isinstance(value, type):
        why = "a class, not a quantizer object"
        fix += f", e.g. {value.__name__}(...) with its arguments"
    elif isinstance(value, keras.layers.Layer):
        why = (
            "a Keras layer that is not a quantizer (it would run on the tensor as a layer, and may change its shape "
            "or add weights)"
        )
    elif callable(getattr(value, "build", None)) and callable(value):
        why = "not a ste quantizer (a TFMOT quantizer object, built and called by TFMOT's own wrapper, not by ste's)"
        fix += "; for your own, subclass ste.quantizers.Quantizer and implement call(inputs)"
    else:
        why = "not a quantizer"
    raise ParameterTypeError(f"{where} returned {_shown(value)} as a quantizer: {why}. Fix: {fix}.")


def _quantizer(value: Quantizer) -> Quantizer:
    """A fresh copy of a quantizer a config returned, so that each use has its own state."""
    copy: Quantizer = type(value).from_config(value.get_config())
    return copy


def _output_shape(layer: keras.layers.Layer, input_shape: Any) -> Any:
    """The layer's output shape: its ``compute_output_shape``, else a symbolic run of its ``call``."""
    try:
        return layer.compute_output_shape(input_shape)
    except NotImplementedError:
        inputs = keras.tree.map_shape_structure(lambda shape: keras.KerasTensor(shape), input_shape)
        spec = layer.compute_output_spec(inputs)
        return keras.tree.map_structure(lambda tensor: tensor.shape, spec)


def _activation_name(activation: Any) -> str:
    return str(getattr(activation, "__name__", type(activation).__name__))


class QuantizeAwareActivation:
    """An activation function with fake quantization before and/or after it (see the module docstring); it records
    whether the layer called it, so that the rewrite knows whether the layer's output is quantized."""

    def __init__(self, activation: Any, pre: Any, post: Any) -> None:
        self.activation = activation
        self.pre = pre
        self.post = post
        self.called = False

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        self.called = True
        if self.pre is not None:
            x = self.pre(x)
        x = self.activation(x, *args, **kwargs)
        return x if self.post is None else self.post(x)


@keras.saving.register_keras_serializable(package="ste")
class QuantizeWrapper(keras.layers.Layer):  # type: ignore[misc]
    """``layer`` quantized by the quantizers ``quantize_config`` (a :class:`ste.qat.QuantizeConfig` subclass)
    carries; see the module docstring. Saved with the layer's and the config's configs: loading needs both classes
    registered with Keras, or passed to ``ste.qat.quantize_scope({...})``."""

    def __init__(self, layer: Any, quantize_config: Any, **kwargs: Any) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        if isinstance(layer, dict):
            layer = keras.saving.deserialize_keras_object(layer)
        if isinstance(quantize_config, dict):
            quantize_config = keras.saving.deserialize_keras_object(quantize_config)
        if not isinstance(layer, keras.layers.Layer) or isinstance(layer, keras.Model):
            raise ParameterError(f"QuantizeWrapper: layer must be a Keras layer (not a model); received {layer!r}.")
        if not all(  # a ste.qat.QuantizeConfig (checked by its methods: _config imports this module)
            callable(getattr(quantize_config, method, None))
            for method in ("get_weights_and_quantizers", "get_activations_and_quantizers", "get_output_quantizers")
        ):
            raise ParameterError(
                f"QuantizeWrapper: quantize_config must be a ste.qat.QuantizeConfig subclass instance; received "
                f"{quantize_config!r}. Fix: subclass ste.qat.QuantizeConfig and pass an instance of it."
            )
        kwargs.setdefault("name", layer.name)
        kwargs.setdefault("dtype", layer.dtype_policy)
        super().__init__(**kwargs)
        self._layer_config = keras.saving.serialize_keras_object(layer)  # before its activations are replaced
        self.layer = layer
        self.quantize_config = quantize_config
        self.weight_quantizers: list[Any] = []
        self.activation_quantizers: list[Any] = []
        self.output_quantizers: list[Any] = []

    def _where(self) -> str:
        return f"QuantizeWrapper '{self.name}' ({type(self.layer).__name__}, {type(self.quantize_config).__name__})"

    def _returned(self, method: str) -> tuple[Any, str]:
        """What the config's ``method`` returns for the layer, and how a message names that call."""
        return getattr(self.quantize_config, method)(self.layer), (
            f"{self._where()}: {type(self.quantize_config).__name__}.{method}(layer)"
        )

    def _checked(self) -> tuple[list[tuple[Any, Quantizer]], list[tuple[Any, Quantizer]], list[Quantizer]]:
        """The config's weights, activations and output quantizers, checked (see the module docstring)."""
        returned, where = self._returned("get_weights_and_quantizers")
        weights = _pairs(returned, where, "weight variable", _WEIGHT_EXAMPLE)
        own = {id(v) for v in self.layer.weights}
        seen: set[int] = set()
        for weight, _ in weights:
            if not isinstance(weight, keras.Variable) or id(weight) not in own:
                raise ParameterError(
                    f"{where} returned {_shown(weight)} as a weight; expected variables of the layer itself (e.g. "
                    f"layer.kernel). Fix: return (variable, quantizer) pairs of the layer's weights."
                )
            if id(weight) in seen:
                raise ParameterError(
                    f"{where} returned {_shown(weight)} twice; each weight is read through one quantizer. Fix: "
                    f"return each weight once."
                )
            seen.add(id(weight))
        weights = [(weight, _check_quantizer(value, where)) for weight, value in weights]
        returned, where = self._returned("get_activations_and_quantizers")
        activations = _pairs(returned, where, "activation function", _ACTIVATION_EXAMPLE)
        for activation, _ in activations:
            if not callable(activation) or isinstance(activation, (keras.Variable, keras.layers.Layer)):
                raise ParameterTypeError(
                    f"{where} returned {_shown(activation)} as an activation; expected the layer's activation "
                    f"function (e.g. layer.activation). Fix: return (layer.activation, quantizer) pairs."
                )
            name = _activation_name(activation)
            if name not in _PRE | _POST:
                raise ParameterError(
                    f"{self._where()}: cannot quantize the activation '{name}': the supported ones are "
                    f"{sorted(_PRE | _POST)} (quantized where TFLite's kernels quantize them). Fix: quantize other "
                    f"activations with an output quantizer (get_output_quantizers), or keep the layer float."
                )
        activations = [(activation, _check_quantizer(value, where)) for activation, value in activations]
        returned, where = self._returned("get_output_quantizers")
        outputs = [_check_quantizer(value, where) for value in _output_list(returned, where)]
        return weights, activations, outputs

    def build(self, input_shape: Any) -> None:
        if not self.layer.built:
            self.layer.build(input_shape)
        weights, pairs, outputs = self._checked()
        output_shape = _output_shape(self.layer, input_shape) if pairs or outputs else None
        shapes = output_shape if isinstance(output_shape, list) else [output_shape]
        if len(outputs) > len(shapes):
            raise ParameterError(
                f"{self._where()}: {type(self.quantize_config).__name__}.get_output_quantizers(layer) returned "
                f"{len(outputs)} quantizers for a layer with {len(shapes)} output(s); expected at most one per "
                f"output. Fix: return one quantizer per output of the layer."
            )
        if not (weights or pairs or outputs) and self.layer.weights:
            warnings.warn(
                f"{self._where()}: the config quantizes nothing (its get_weights_and_quantizers, "
                f"get_activations_and_quantizers and get_output_quantizers return empty lists), so the layer's "
                f"{len(self.layer.weights)} weight(s) stay float inside the wrapper and in the TFLite model. Fix: "
                f"return the weights to quantize, e.g. {_WEIGHT_EXAMPLE}; or annotate the layer with "
                f"ste.qat.QuantizeConfig(float=True) to keep it float without this warning.",
                UserWarning,
                stacklevel=2,
            )
        variables = []
        for weight, value in weights:
            quantizer = _quantizer(value)
            quantizer.build(weight.shape)
            variables.append(weight)
            self.weight_quantizers.append(quantizer)
        object.__setattr__(self, "_quantized_weights", variables)  # the layer's own; not tracked twice
        activations = []
        for activation, value in pairs:
            name = _activation_name(activation)
            pre = _quantizer(value) if name in _PRE else None
            post = _quantizer(value) if name in _POST else None
            for made in (pre, post):
                if made is not None:
                    made.build(output_shape)
                    self.activation_quantizers.append(made)
            activations.append(QuantizeAwareActivation(activation, pre, post))
        object.__setattr__(self, "_activations", activations)
        if activations:
            self.quantize_config.set_quantize_activations(self.layer, activations)
        for value, shape in zip(outputs, shapes):
            quantizer = _quantizer(value)
            quantizer.build(shape)
            self.output_quantizers.append(quantizer)
        self.built = True

    @property
    def quantizes_output(self) -> bool:
        """Whether the output is quantized: by an output quantizer, or by an activation quantized after it runs
        that the layer calls (known once the wrapper has been called)."""
        activations = getattr(self, "_activations", [])
        return bool(self.output_quantizers) or any(a.called and a.post is not None for a in activations)

    def call(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        weights = self._quantized_weights
        quantized = [quantizer(weight.value) for weight, quantizer in zip(weights, self.weight_quantizers)]
        outputs = call_with_values(
            self,
            list(zip(weights, quantized)),
            self.variables,  # assignments inside the layer (moving statistics, activation ranges)
            lambda: self.layer(inputs, *args, **kwargs),
        )
        if not self.output_quantizers:
            return outputs
        flat = keras.tree.flatten(outputs)
        flat = [q(x) for q, x in zip(self.output_quantizers, flat)] + flat[len(self.output_quantizers) :]
        return keras.tree.pack_sequence_as(outputs, flat)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "layer": self._layer_config,
            "quantize_config": keras.saving.serialize_keras_object(self.quantize_config),
        }
