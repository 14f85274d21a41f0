"""The public calls: :func:`quantize_model`, :func:`quantize_annotate_layer`, :func:`quantize_apply`,
:func:`quantize_scope`, :func:`to_tflite` (TFMOT's names, for Keras 3)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

import keras
import tensorflow as tf

from .._arguments import check_bool
from .._errors import ParameterError, UnsupportedLayerError
from ._folded import FoldedConv2D, FoldedDepthwiseConv2D
from ._int8 import Int8Scheme
from ._lowbit import BinaryScheme, TernaryScheme
from ._quantizers import ActivationFakeQuant, WeightFakeQuant
from ._scheme import QuantizeConfig, Scheme
from ._separable import SplitSeparableConv1D, SplitSeparableConv2D
from ._transform import ANNOTATION, Rewrite, rewrite
from ._transformer import QuantEinsumDense, QuantEmbedding, QuantMultiHeadAttention

__all__ = ["quantize_annotate_layer", "quantize_apply", "quantize_model", "quantize_scope", "schemes", "to_tflite"]

_SCHEMES: dict[str, type[Scheme]] = {"int8": Int8Scheme, "binary": BinaryScheme, "ternary": TernaryScheme}


def schemes() -> list[str]:
    """The scheme names :func:`quantize_model` accepts."""
    return sorted(_SCHEMES)


def _scheme(scheme: Any) -> Scheme:
    if isinstance(scheme, Scheme):
        return scheme
    if isinstance(scheme, str) and scheme in _SCHEMES:
        return _SCHEMES[scheme]()
    raise ParameterError(
        f"ste.quantize_model: unknown scheme {scheme!r}; expected one of {schemes()} or a ste.qat.Scheme instance."
    )


def _check_model(model: Any, owner: str) -> None:
    if not isinstance(model, keras.Model):
        raise ParameterError(
            f"{owner}: expected a Keras 3 model (functional or Sequential); received {type(model).__name__}. "
            f"Fix: pass the keras.Model itself."
        )


def _run(model: keras.Model, scheme: Any, select: Any, strict: bool, owner: str) -> keras.Model:
    strict = check_bool(owner, "strict", strict)
    _check_model(model, owner)
    job = Rewrite(_scheme(scheme), select)
    if strict:
        probe = Rewrite(job.scheme, select)
        rewrite(model, probe)
        if probe.uncovered:
            raise UnsupportedLayerError(
                f"{owner}(strict=True): the scheme '{job.scheme.name}' does not cover {', '.join(probe.uncovered)}. "
                f"Fix: annotate each such layer before quantizing, ste.quantize_annotate_layer(layer, "
                f"config=ste.qat.QuantizeConfig(quantize_output=True)) to quantize around it, or "
                f"config=ste.qat.QuantizeConfig(float=True) to keep it float; or pass strict=False to keep the "
                f"uncovered layers float with a warning."
            )
    new = rewrite(model, job)
    if job.uncovered:
        warnings.warn(
            f"{owner}: the scheme '{job.scheme.name}' does not cover {len(job.uncovered)} layer(s), which stay "
            f"float: {', '.join(job.uncovered)}. Annotate them (ste.quantize_annotate_layer(layer, config=...)) "
            f"or pass strict=True to make this an error.",
            UserWarning,
            stacklevel=3,
        )
    return new


def quantize_model(model: keras.Model, scheme: str | Scheme = "int8", strict: bool = False) -> keras.Model:
    """A quantization-aware copy of ``model`` (TFMOT's ``quantize_model``), with its trained float weights.

    The new model has the same inputs and outputs, and is ready to ``compile``/``fit``; functional and Sequential
    models (nested ones too) are supported. Layers the scheme does not cover stay float, named in one warning;
    ``strict=True`` raises :class:`ste.UnsupportedLayerError` instead. Annotated layers
    (:func:`quantize_annotate_layer`) use their config. See docs/qat.md.
    """
    return _run(model, scheme, lambda layer: True, strict, "ste.quantize_model")


def quantize_annotate_layer(layer: keras.layers.Layer, config: QuantizeConfig | None = None) -> keras.layers.Layer:
    """Mark ``layer`` for :func:`quantize_apply` (TFMOT's ``quantize_annotate_layer``) and return it.

    ``config=None`` quantizes it as the scheme does; a :class:`ste.qat.QuantizeConfig` chooses for it. The mark
    lives on the layer object (it is not saved): annotate, then quantize in the same program.
    """
    if not isinstance(layer, keras.layers.Layer):
        raise ParameterError(f"ste.quantize_annotate_layer: expected a Keras layer; received {type(layer).__name__}.")
    if config is not None and not isinstance(config, QuantizeConfig):
        raise ParameterError(
            f"ste.quantize_annotate_layer: config must be None or a ste.qat.QuantizeConfig; received {config!r}."
        )
    object.__setattr__(layer, ANNOTATION, config)  # None: the scheme decides
    return layer


def _annotated(layer: keras.layers.Layer) -> bool:
    return hasattr(layer, ANNOTATION)


def quantize_apply(model: keras.Model, scheme: str | Scheme = "int8", strict: bool = False) -> keras.Model:
    """Quantize only the annotated layers of ``model`` (TFMOT's ``quantize_apply``); the others stay float,
    without a warning."""
    return _run(model, scheme, _annotated, strict, "ste.quantize_apply")


_CUSTOM_OBJECTS = {
    cls.__name__: cls
    for cls in (
        ActivationFakeQuant,
        WeightFakeQuant,
        FoldedConv2D,
        FoldedDepthwiseConv2D,
        SplitSeparableConv1D,
        SplitSeparableConv2D,
        QuantEinsumDense,
        QuantEmbedding,
        QuantMultiHeadAttention,
    )
}


@contextlib.contextmanager
def quantize_scope() -> Iterator[None]:
    """TFMOT's ``quantize_scope``: ste's QAT layers as Keras custom objects.

    ``import ste`` already registers them (as ``"ste>FoldedConv2D"`` ...), so loading a ``.keras`` file needs only
    that import. The scope is for code written for TFMOT, and for configs that name the classes without the
    ``ste>`` package (hand-written ``from_config`` calls).
    """
    with keras.saving.custom_object_scope(_CUSTOM_OBJECTS):
        yield


_LOW_PRECISION = ("mixed_float16", "mixed_bfloat16", "float16", "bfloat16")


def _float32_policies(config: Any) -> Any:
    """A serialized model with every low-precision dtype policy replaced by float32."""
    if isinstance(config, dict):
        if config.get("class_name") == "DTypePolicy" and isinstance(config.get("config"), dict):
            if config["config"].get("name") in _LOW_PRECISION:
                return {**config, "config": {**config["config"], "name": "float32"}}
        return {key: _float32_policies(value) for key, value in config.items()}
    if isinstance(config, list):
        return [_float32_policies(value) for value in config]
    return config


def _in_float32(model: keras.Model) -> keras.Model:
    """``model`` itself if it computes in float32, else a float32 copy with its weights: TensorFlow's fake-quant
    kernels, which the converter reads ranges from, take float32 only (a mixed-precision model's float16 formula
    is not one of them)."""
    if all(layer.compute_dtype == "float32" for layer in model._flatten_layers()):
        return model
    copy = keras.saving.deserialize_keras_object(_float32_policies(keras.saving.serialize_keras_object(model)))
    copy.set_weights(model.get_weights())
    return copy


def _export_for_inference(model: keras.Model, path: str) -> None:
    """What ``model.export(path)`` writes, without the gradient functions of the custom-gradient ops.

    ``model.export`` saves with ``experimental_custom_gradients=True``, which traces every custom gradient of the
    model into the SavedModel; the converter never reads them. Keras's ``export`` takes no save options, so this is
    its body (the same endpoint and input signature) with that option off: the same flatbuffer, in half the time
    (MobileNetV2: 50 s against 106 s here).
    """
    from keras.src.export.export_utils import get_input_signature  # what model.export uses (no public accessor)

    archive = keras.export.ExportArchive()
    archive.track_and_add_endpoint("serve", model, get_input_signature(model))
    archive.write_out(path, options=tf.saved_model.SaveOptions(experimental_custom_gradients=False), verbose=False)


def to_tflite(model: keras.Model, int8_io: bool = False) -> bytes:
    """The int8 TFLite flatbuffer of a quantization-aware model: ``model.export`` (without the training-only
    gradient functions) then the stock ``tf.lite.TFLiteConverter.from_saved_model`` with
    ``optimizations=[tf.lite.Optimize.DEFAULT]``.

    ``int8_io=True`` also makes the model's inputs and outputs int8 (no float quantize/dequantize at the edges; the
    input scale and zero point are in the interpreter's input details). A model trained under a mixed-precision
    policy is exported as a float32 copy with the same weights (the converter reads ranges only from float32
    fake-quant ops).
    """
    int8_io = check_bool("ste.to_tflite", "int8_io", int8_io)
    _check_model(model, "ste.to_tflite")
    model = _in_float32(model)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "saved_model")
        _export_for_inference(model, path)
        converter = tf.lite.TFLiteConverter.from_saved_model(path)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if int8_io:
            converter.inference_input_type = tf.int8
            converter.inference_output_type = tf.int8
        return bytes(converter.convert())
