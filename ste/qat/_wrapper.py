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
"""

from __future__ import annotations

from typing import Any

import keras

from .._keras._stateless import call_with_values
from ..errors import ParameterError

__all__ = ["QuantizeAwareActivation", "QuantizeWrapper"]

_PRE = frozenset({"softmax", "sigmoid", "tanh", "gelu"})
_POST = frozenset({"linear", "relu", "relu6", "swish", "silu", "gelu"})


def _quantizer(value: Any, owner: str) -> Any:
    """A fresh copy of a quantizer a config returned (a Keras layer), or the callable itself."""
    from ..quantizers import get

    resolved = get(value)
    if isinstance(resolved, keras.layers.Layer):
        return type(resolved).from_config(resolved.get_config())
    if resolved is None or not callable(resolved):
        raise ParameterError(f"{owner}: {value!r} is not a quantizer; expected a ste.quantizers.Quantizer.")
    return resolved


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

    def build(self, input_shape: Any) -> None:
        if not self.layer.built:
            self.layer.build(input_shape)
        config, owner = self.quantize_config, self._where()
        own = {id(v) for v in self.layer.weights}
        variables = []
        for weight, value in list(config.get_weights_and_quantizers(self.layer) or []):
            if not isinstance(weight, keras.Variable) or id(weight) not in own:
                raise ParameterError(
                    f"{owner}: get_weights_and_quantizers returned {weight!r}; expected variables of the layer "
                    f"itself (e.g. layer.kernel). Fix: return (variable, quantizer) pairs of the layer's weights."
                )
            quantizer = _quantizer(value, owner)
            if isinstance(quantizer, keras.layers.Layer):
                quantizer.build(weight.shape)
            variables.append(weight)
            self.weight_quantizers.append(quantizer)
        object.__setattr__(self, "_quantized_weights", variables)  # the layer's own; not tracked twice
        pairs = list(config.get_activations_and_quantizers(self.layer) or [])
        outputs = list(config.get_output_quantizers(self.layer) or [])
        output_shape = _output_shape(self.layer, input_shape) if pairs or outputs else None
        activations = []
        for activation, value in pairs:
            name = _activation_name(activation)
            if name not in _PRE | _POST:
                raise ParameterError(
                    f"{owner}: cannot quantize the activation '{name}': the supported ones are "
                    f"{sorted(_PRE | _POST)} (quantized where TFLite's kernels quantize them). Fix: quantize other "
                    f"activations with an output quantizer (get_output_quantizers), or keep the layer float."
                )
            pre = _quantizer(value, owner) if name in _PRE else None
            post = _quantizer(value, owner) if name in _POST else None
            for quantizer in (pre, post):
                if isinstance(quantizer, keras.layers.Layer):
                    quantizer.build(output_shape)
                    self.activation_quantizers.append(quantizer)
            activations.append(QuantizeAwareActivation(activation, pre, post))
        object.__setattr__(self, "_activations", activations)
        if activations:
            config.set_quantize_activations(self.layer, activations)
        shapes = output_shape if isinstance(output_shape, list) else [output_shape]
        for value, shape in zip(outputs, shapes):
            quantizer = _quantizer(value, owner)
            if isinstance(quantizer, keras.layers.Layer):
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
