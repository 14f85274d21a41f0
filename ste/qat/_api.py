"""The public calls: :func:`quantize_model`, :func:`quantize_annotate_layer`, :func:`quantize_annotate_model`,
:func:`quantize_apply`, :func:`quantize_scope`, :func:`to_tflite` (TFMOT's names, for Keras 3)."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_bool
from .._keras._rewrite import walk
from .._keras._scopes import custom_object_scope
from .._keras._versions import PER_CHANNEL_MATMULS
from ..errors import ConversionError, ParameterError
from ._attention import QuantSoftmax
from ._config import QuantizeConfig
from ._folded import FoldedConv2D, FoldedDepthwiseConv2D
from ._preserve import PreservingWeightFakeQuant
from ._quantizers import ActivationFakeQuant, WeightFakeQuant
from ._rewrite import ANNOTATION, FIX_INPUTS, Quantize, adapted_layers, quantize
from ._scheme import Scheme
from ._scheme_names import SCHEMES, schemes, suggestion
from ._separable import SplitSeparableConv1D, SplitSeparableConv2D
from ._tfmot_quantizers import AllValuesQuantizer, FixedQuantizer, LastValueQuantizer, MovingAverageQuantizer
from ._transformer import QuantEinsumDense, QuantEmbedding, QuantMultiHeadAttention, QuantReversibleEmbedding
from ._wrapper import QuantizeWrapper

__all__ = [
    "quantize_annotate_layer",
    "quantize_annotate_model",
    "quantize_apply",
    "quantize_model",
    "quantize_scope",
    "schemes",
    "to_tflite",
]


def _scheme(scheme: Any, owner: str = "ste.quantize_model") -> Scheme:
    if isinstance(scheme, Scheme):
        return scheme
    factory = SCHEMES.get(scheme) if isinstance(scheme, str) else None
    if factory is not None:
        built = factory()
        if not isinstance(built, Scheme):
            raise ParameterError(
                f"{owner}: the scheme registered as {scheme!r} returned {type(built).__name__}, not a "
                f"ste.qat.Scheme. Fix: register a Scheme subclass or a function returning a Scheme instance."
            )
        return built
    meant, note = suggestion(scheme, schemes()) if isinstance(scheme, str) else ("", "")
    if isinstance(scheme, type) and issubclass(scheme, Scheme):
        meant, note = f"ste.qat.{scheme.__name__}()", "an instance, not the class"
    hint = f" Did you mean {meant}{f' ({note})' if note else ''}? Fix: scheme={meant}" if meant else ""
    if meant == "ste.qat.NBitScheme(num_bits_weight=4)" and "a8" not in scheme.lower():  # W4A8 says its activations
        hint += ", or ste.qat.NBitScheme(num_bits_weight=4, num_bits_activation=None) for int4 weight-only"
    hint += "." if meant else ""
    hint = hint or (f" {note}." if note else "")
    raise ParameterError(
        f"{owner}: unknown scheme {scheme!r}; expected one of {schemes()} or a ste.qat.Scheme instance (e.g. "
        f"ste.qat.NBitScheme(num_bits_weight=4) for 4-bit weights with 8-bit activations, "
        f"ste.qat.NBitScheme(num_bits_weight=4, num_bits_activation=None) for int4 weight-only).{hint}"
    )


def _check_model(model: Any, owner: str) -> None:
    if not isinstance(model, keras.Model):
        raise ParameterError(
            f"{owner}: expected a Keras 3 model (functional or Sequential); received {type(model).__name__}. "
            f"Fix: pass the keras.Model itself."
        )


def _check_stripped(model: keras.Model) -> None:
    """A pruning or clustering wrapper left in the model would be exported as its training graph (the float latent
    kernel beside the mask or the centroid distances), which is neither smaller nor what the user trained for."""
    for layer in model._flatten_layers(include_self=False):
        strip = getattr(type(layer), "strip_with", None)
        if isinstance(strip, str):
            raise ConversionError(
                f"ste.to_tflite: the layer '{layer.name}' is still a {type(layer).__name__} training wrapper; a "
                f"flatbuffer of it holds the float latent kernel and the training-time ops, not the small kernel. "
                f"Fix: model = {strip}(model) first, then convert."
            )


def _prefix(owner: str, prefix: Any) -> str:
    if prefix is None:
        return ""
    if not isinstance(prefix, str):
        raise ParameterError(f"{owner}: quantized_layer_name_prefix must be a string or None; received {prefix!r}.")
    if "/" in prefix:  # Keras refuses a layer name with "/" (it separates the parts of a variable's path)
        raise ParameterError(
            f"{owner}: quantized_layer_name_prefix must not contain '/' (Keras layer names cannot); received "
            f'{prefix!r}. Fix: e.g. quantized_layer_name_prefix="quant_".'
        )
    return prefix


def _run(model: keras.Model, scheme: Any, select: Any, strict: bool, prefix: Any, owner: str) -> keras.Model:
    strict = check_bool(owner, "strict", strict)
    prefix = _prefix(owner, prefix)
    _check_model(model, owner)
    job = Quantize(_scheme(scheme, owner), prefix, owner, strict)
    new = quantize(model, job, select, strict)
    if job.adapted:
        warnings.warn(
            f"{owner}: the scheme '{job.scheme.name}' quantizes the input of {len(job.adapted)} layer(s) otherwise, "
            f"because a non-negative activation feeds them: {adapted_layers(job)}. Fix: {FIX_INPUTS}; or pass "
            f"strict=True to make this an error.",
            UserWarning,
            stacklevel=3,
        )
    return new


def quantize_model(
    model: keras.Model,
    scheme: str | Scheme = "int8",
    strict: bool = False,
    quantized_layer_name_prefix: str | None = "",
    filters: Any = None,
) -> keras.Model:
    """A quantization-aware copy of ``model`` (TFMOT's ``quantize_model``), with its trained float weights.

    The new model has the same inputs and outputs, and is ready to ``compile``/``fit``. Any Keras 3 model is
    supported: Sequential and functional graphs (with their operation nodes), nested and subclassed models, KerasHub's
    models (their class kept), and the compute layers inside composite layers such as transformer blocks, at any
    depth; a layer or nested model the float model calls more than once stays one layer, called as often. Layers
    the scheme does not cover stay float, named in one warning; ``strict=True`` raises
    :class:`ste.errors.UnsupportedLayerError` instead. Annotated layers (:func:`quantize_annotate_layer`) use their
    config. Each quantized layer is named ``quantized_layer_name_prefix`` + the float layer's name (TFMOT's
    default prefix is ``"quant_"``; ste's keeps the names). ``filters`` chooses which of the layers the scheme covers
    are quantized (a regular expression searched in the layer's name, a layer class, a callable ``layer -> bool``,
    or a list of those, as Keras's ``model.quantize``); the others stay float without a warning. The copy is not
    compiled (compile it, as TFMOT's result). See docs/qat.md.
    """
    return _run(model, scheme, filters, strict, quantized_layer_name_prefix, "ste.quantize_model")


def quantize_annotate_layer(
    layer: keras.layers.Layer, config: QuantizeConfig | None = None, *, quantize_config: QuantizeConfig | None = None
) -> keras.layers.Layer:
    """Mark ``layer`` for :func:`quantize_apply` (TFMOT's ``quantize_annotate_layer``) and return it.

    ``config=None`` quantizes it as the scheme does; a :class:`ste.qat.QuantizeConfig` chooses for it
    (``quantize_config=`` is TFMOT's name for the same argument). The mark lives on the layer object (it is not
    saved): annotate the layer objects the model calls, then quantize in the same program.
    """
    owner = "ste.qat.quantize_annotate_layer"
    if quantize_config is not None:
        if config is not None:
            raise ParameterError(f"{owner}: pass config or quantize_config (TFMOT's name for it), not both.")
        config = quantize_config
    if isinstance(layer, keras.Model):
        raise ParameterError(
            f"{owner}: expected a Keras layer; received the model '{layer.name}' ({type(layer).__name__}). "
            "Fix: ste.qat.quantize_annotate_model(model) annotates every layer of a model, or annotate its layers one "
            "by one."
        )
    if not isinstance(layer, keras.layers.Layer):
        raise ParameterError(f"{owner}: expected a Keras layer; received {type(layer).__name__}.")
    if config is not None and not isinstance(config, QuantizeConfig):
        raise ParameterError(f"{owner}: config must be None or a ste.qat.QuantizeConfig; received {config!r}.")
    object.__setattr__(layer, ANNOTATION, config)  # None: the scheme decides
    return layer


def quantize_annotate_model(model: keras.Model) -> keras.Model:
    """Mark every layer of ``model`` (nested models' included) for :func:`quantize_apply` (TFMOT's
    ``quantize_annotate_model``) and return ``model``; layers already annotated keep their config.

    ``quantize_apply(quantize_annotate_model(model))`` is ``quantize_model(model)``. The marks live on the layer
    objects, as :func:`quantize_annotate_layer`'s."""
    owner = "ste.qat.quantize_annotate_model"
    if not isinstance(model, keras.Model):
        raise ParameterError(
            f"{owner}: expected a Keras model (functional or Sequential); received {type(model).__name__}. Fix: "
            f"ste.qat.quantize_annotate_layer(layer) annotates one layer."
        )
    for _, layer in walk(model):
        if not _annotated(layer):
            object.__setattr__(layer, ANNOTATION, None)
    return model


def _annotated(layer: keras.layers.Layer) -> bool:
    return hasattr(layer, ANNOTATION)


def quantize_apply(
    model: keras.Model,
    scheme: str | Scheme = "int8",
    strict: bool = False,
    quantized_layer_name_prefix: str | None = "",
) -> keras.Model:
    """Quantize only the annotated layers of ``model`` (TFMOT's ``quantize_apply``); the others stay float,
    without a warning. A model without an annotated layer raises :class:`ste.errors.ParameterError` (it would give a
    float copy). Names as :func:`quantize_model`."""
    owner = "ste.qat.quantize_apply"
    check_bool(owner, "strict", strict)
    _check_model(model, owner)
    if not any(_annotated(layer) for _, layer in walk(model)):
        raise ParameterError(
            f"{owner}: no layer of model '{model.name}' is annotated, so the result would be a float copy. Expected "
            f"layers marked by ste.qat.quantize_annotate_layer(layer) or ste.qat.quantize_annotate_model(model). Fix: "
            f"annotate with ste.qat.quantize_annotate_layer(layer) the layer objects the model uses (a layer annotated "
            f"after the model was cloned or rebuilt is another object), or call ste.quantize_model(model)."
        )
    return _run(model, scheme, _annotated, strict, quantized_layer_name_prefix, owner)


_CUSTOM_OBJECTS = {
    cls.__name__: cls
    for cls in (
        ActivationFakeQuant,
        WeightFakeQuant,
        PreservingWeightFakeQuant,
        LastValueQuantizer,
        MovingAverageQuantizer,
        AllValuesQuantizer,
        FixedQuantizer,
        QuantizeWrapper,
        QuantizeConfig,
        FoldedConv2D,
        FoldedDepthwiseConv2D,
        SplitSeparableConv1D,
        SplitSeparableConv2D,
        QuantEinsumDense,
        QuantEmbedding,
        QuantMultiHeadAttention,
        QuantSoftmax,
        *([QuantReversibleEmbedding] if QuantReversibleEmbedding is not None else []),
    )
}


@contextlib.contextmanager
def quantize_scope(*custom_objects: Mapping[str, Any]) -> Iterator[None]:
    """TFMOT's ``quantize_scope``: ste's QAT layers as Keras custom objects, plus the ``{name: class}`` dicts given
    (a custom layer, a :class:`ste.qat.QuantizeConfig` subclass, a custom quantizer), e.g.
    ``with ste.qat.quantize_scope({"MyConfig": MyConfig, "MyLayer": MyLayer}): keras.models.load_model(path)``.

    Loading ste registers ste's classes (as ``"ste>FoldedConv2D"`` ...), so loading a ``.keras`` file of
    built-in layers needs only that import; a model with your own classes needs them here (or registered with
    ``keras.saving.register_keras_serializable``). ste copies layers without cloning the model, so
    :func:`quantize_model` and :func:`quantize_apply` need no scope.
    """
    with custom_object_scope(
        "ste.qat.quantize_scope", _CUSTOM_OBJECTS, custom_objects, "ste.qat.quantize_scope({'MyConfig': MyConfig})"
    ):
        yield


#: the policies ``to_tflite`` converts through a float32 copy (the converter fails on a float64 graph's int8 ops too)
_NOT_FLOAT32 = ("mixed_float16", "mixed_bfloat16", "float16", "bfloat16", "float64")


def _float32_policies(config: Any) -> Any:
    """A serialized model with every float dtype policy other than float32 replaced by float32."""
    if isinstance(config, dict):
        if config.get("class_name") == "DTypePolicy" and isinstance(config.get("config"), dict):
            if config["config"].get("name") in _NOT_FLOAT32:
                return {**config, "config": {**config["config"], "name": "float32"}}
        return {key: _float32_policies(value) for key, value in config.items()}
    if isinstance(config, list):
        return [_float32_policies(value) for value in config]
    return config


def _in_float32(model: keras.Model) -> keras.Model:
    """``model`` itself if it computes in float32, else a float32 copy with its weights: TensorFlow's fake-quant
    kernels, which the converter reads ranges from, take float32 only (a mixed-precision model's float16 formula
    is not one of them, and a float64 model's int8 ops fail to convert)."""
    if all(layer.compute_dtype == "float32" for layer in model._flatten_layers()):
        return model
    copy = keras.saving.deserialize_keras_object(_float32_policies(keras.saving.serialize_keras_object(model)))
    copy.set_weights(model.get_weights())
    return copy


def _export_for_inference(model: keras.Model, path: str) -> None:
    """What ``model.export(path)`` writes, without the gradient functions of the custom-gradient ops.

    ``model.export`` saves with ``experimental_custom_gradients=True``, which traces every custom gradient of the
    model into the SavedModel; the converter never reads them. Keras's ``export`` takes no save options, so this is
    its body (the same endpoint and input signature) with that option off: the same flatbuffer, without tracing a
    gradient function per custom-gradient op.
    """
    from keras.src.export.export_utils import get_input_signature  # what model.export uses (no public accessor)

    archive = keras.export.ExportArchive()
    archive.track_and_add_endpoint("serve", model, get_input_signature(model))
    archive.write_out(path, options=tf.saved_model.SaveOptions(experimental_custom_gradients=False), verbose=False)


#: the notice TensorFlow logs when it loads a SavedModel function whose custom gradients were not saved
_UNSAVED_GRADIENTS = "with ops with unsaved custom gradients"


class _WithoutUnsavedGradientsNotice(logging.Filter):
    """Drops TensorFlow's "Importing a function (...) with ops with unsaved custom gradients. Will likely fail if a
    gradient is requested.", logged (twice) when the converter loads the SavedModel of ``_export_for_inference``.
    That SavedModel leaves the gradient functions out on purpose, and the converter reads only the forward graph and
    never requests a gradient, so the notice is wrong here; it contradicts the docs that say exports keep the custom
    gradients (``model.export`` does). Every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _UNSAVED_GRADIENTS not in record.getMessage()


@contextlib.contextmanager
def _quiet_inference_load() -> Iterator[None]:
    """``_WithoutUnsavedGradientsNotice`` on the loggers TensorFlow's SavedModel loader writes to (absl's in
    TensorFlow 2.21, TensorFlow's own in earlier releases), for the duration of one conversion."""
    loggers = [logging.getLogger("absl"), logging.getLogger("tensorflow")]
    notice = _WithoutUnsavedGradientsNotice()
    for logger in loggers:
        logger.addFilter(notice)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(notice)


_ACTIVATION_QUANTIZERS = (ActivationFakeQuant, MovingAverageQuantizer, AllValuesQuantizer, FixedQuantizer)


def _check_activation_bits(model: keras.Model) -> None:
    """TFLite has no kernels for activations below 8 bits: the converter fails on them ("'tfl.conv_2d' op operand
    #0 must be tensor of ... QI8 ... but got ... i4"). Refused here, naming the quantizer."""
    for layer in model._flatten_layers():
        if isinstance(layer, _ACTIVATION_QUANTIZERS) and layer.bits < 8:
            raise ConversionError(
                f"ste.to_tflite: the activation quantizer '{layer.name}' of model '{model.name}' has {layer.bits} "
                f"bits; TFLite's int8 kernels take 8-bit activations only (the converter fails on {layer.bits}-bit "
                f"ones). Fix: quantize activations to 8 bits (ste.qat.NBitScheme(num_bits_activation=8), weights "
                f"may keep fewer bits), or deploy the model with a runtime that has {layer.bits}-bit kernels."
            )


def _per_channel_matmul(model: keras.Model) -> keras.layers.Layer | None:
    """The first Dense, EinsumDense or reverse-embedding layer of ``model`` whose kernel is fake-quantized per output
    channel, or None. The converter's default path fails on such a kernel ("'tfl.transpose' op has mismatched
    quantized axes of input and output": it transposes the kernel into FULLY_CONNECTED's (out, in) layout without
    moving the quantized axis); from TensorFlow 2.20 on, its QDQ conversion mode ``"STATIC"`` (the one AI Edge Torch
    converts its quantized models with) makes the per-channel int8 FULLY_CONNECTED kernel (quantized dimension 0)."""
    for layer in model._flatten_layers():
        if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense, keras.layers.Embedding)):
            for slot in getattr(layer, "slots", ()):
                if getattr(getattr(layer, slot.quantizer, None), "channel_axes", 0):
                    return layer
    return None


def _check_per_channel_matmuls(model: keras.Model) -> bool:
    """Whether ``model`` has a per-channel Dense, EinsumDense or reverse-embedding kernel (see
    :func:`_per_channel_matmul`). TensorFlow before 2.20 has no converter for one: refused here, naming the layer."""
    layer = _per_channel_matmul(model)
    if layer is not None and not PER_CHANNEL_MATMULS:
        raise ConversionError(
            f"ste.to_tflite: the kernel of layer '{layer.name}' ({type(layer).__name__}) of model '{model.name}' is "
            f"quantized per output channel, which TFLite's converter takes from TensorFlow 2.20 on; this is "
            f"TensorFlow {tf.__version__}. Fix: pip install -U 'tensorflow>=2.20', or quantize Dense and EinsumDense "
            f"per tensor: ste.quantize_model(model, scheme=ste.qat.Int8Scheme(per_output_channel=False)) (the "
            f"default under this TensorFlow)."
        )
    return layer is not None


@contextlib.contextmanager
def _tables_on_int8_grid(model: keras.Model) -> Iterator[None]:
    """Embedding tables quantized to fewer than 8 bits, exported on the 8-bit grid of the same step, while the block
    runs. TFLite's GATHER takes 8-bit tables only: the converter fails on a 4-bit one ("'tfl.gather' op operand #0
    must be tensor of ... QI8 ..., but got ... i4"); the same values as an int8 table take 2^b − 1 of its levels, as
    the b-bit kernels of FULLY_CONNECTED and CONV_2D do. Refused, naming the layer, for a table whose quantizer has
    another grid (per channel, or not narrow range)."""
    tables = []
    for layer in model._flatten_layers():
        quantizer = getattr(layer, "embeddings_quantizer", None) if isinstance(layer, keras.layers.Embedding) else None
        if quantizer is None or getattr(quantizer, "bits", 8) >= 8:
            continue
        if not isinstance(quantizer, WeightFakeQuant) or quantizer.channel_axes or not quantizer.narrow_range:
            raise ConversionError(
                f"ste.to_tflite: the embedding table of layer '{layer.name}' of model '{model.name}' is quantized to "
                f"{quantizer.bits} bits by {quantizer!r}; TFLite's GATHER takes 8-bit tables, and ste writes a "
                f"{quantizer.bits}-bit table as one only for a WeightFakeQuant per tensor with narrow_range=True. "
                f"Fix: quantize the table with WeightFakeQuant(bits={quantizer.bits}) or at 8 bits."
            )
        tables.append(quantizer)
    try:
        for quantizer in tables:
            quantizer._on_int8_grid = True
        yield
    finally:
        for quantizer in tables:
            quantizer._on_int8_grid = False


def to_tflite(model: keras.Model, int8_io: bool = False, *, optimizations: Sequence[Any] | None = None) -> bytes:
    """The int8 TFLite flatbuffer of a quantization-aware model: ``model.export`` (without the training-only
    gradient functions) then the stock ``tf.lite.TFLiteConverter.from_saved_model`` with
    ``optimizations=[tf.lite.Optimize.DEFAULT]``.

    ``optimizations`` replaces that list (the converter's own attribute): ``[]`` converts a float model (a stripped
    clustered or pruned one) to a float flatbuffer, whose kernels keep their exact values.

    ``int8_io=True`` also makes the model's inputs and outputs int8 (no float quantize/dequantize at the edges; the
    input scale and zero point are in the interpreter's input details). A model trained under a mixed-precision
    policy, or in float16, bfloat16 or float64, is exported as a float32 copy with the same weights (the converter
    reads ranges only from float32 fake-quant ops).
    """
    int8_io = check_bool("ste.to_tflite", "int8_io", int8_io)
    if optimizations is not None and (
        isinstance(optimizations, (str, tf.lite.Optimize))
        or not all(isinstance(o, tf.lite.Optimize) for o in optimizations)
    ):
        raise ParameterError(
            f"ste.to_tflite: optimizations must be a list of tf.lite.Optimize members or None; received "
            f"{optimizations!r}. Fix: e.g. optimizations=[] for a float flatbuffer, or leave it None."
        )
    _check_model(model, "ste.to_tflite")
    _check_stripped(model)
    _check_activation_bits(model)
    per_channel = _check_per_channel_matmuls(model)
    model = _in_float32(model)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "saved_model")
        with _tables_on_int8_grid(model):
            _export_for_inference(model, path)
        with _quiet_inference_load():
            converter = tf.lite.TFLiteConverter.from_saved_model(path)
            converter.optimizations = [tf.lite.Optimize.DEFAULT] if optimizations is None else list(optimizations)
            if per_channel:
                converter._experimental_qdq_conversion_mode = "STATIC"
            if int8_io:
                converter.inference_input_type = tf.int8
                converter.inference_output_type = tf.int8
            return bytes(converter.convert())
