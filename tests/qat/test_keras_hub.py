"""QAT of KerasHub's backbones (BERT, DistilBERT, GPT-2, Gemma, Llama, ViT) at tiny configs with random weights:
what each scheme covers (``Rewriter.plan.coverage``, against the model's own weights), KerasHub's attention layers
quantized inside (``CachedMultiHeadAttention`` keeps its cache call; Gemma's and Llama's attention take quantized
matmul operands), and the int8 GPT-2, BERT and ViT in LiteRT's interpreter against Keras's output of the QAT model,
with the float ops of each flatbuffer read from the flatbuffer itself.

keras-hub is a test dependency only: without it this module is skipped."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest

import ste
from ste._keras._rewrite import Rewriter, is_weight
from ste.qat._api import _scheme
from ste.qat._rewrite import Quantize, QuantizedGraph

from .helpers import interpreter, numpy_fake_quant, ops

keras_hub = pytest.importorskip(
    "keras_hub", reason="keras-hub is not installed (a test dependency: pip install keras-hub)"
)


def gpt2(layers: int = 2) -> keras.Model:
    return keras_hub.models.GPT2Backbone(
        vocabulary_size=100, num_layers=layers, num_heads=2, hidden_dim=32, intermediate_dim=64, max_sequence_length=16
    )


def bert(layers: int = 2) -> keras.Model:
    return keras_hub.models.BertBackbone(
        vocabulary_size=100, num_layers=layers, num_heads=2, hidden_dim=32, intermediate_dim=64, max_sequence_length=16
    )


def distilbert(layers: int = 2) -> keras.Model:
    return keras_hub.models.DistilBertBackbone(
        vocabulary_size=100, num_layers=layers, num_heads=2, hidden_dim=32, intermediate_dim=64, max_sequence_length=16
    )


def gemma(layers: int = 2) -> keras.Model:
    return keras_hub.models.GemmaBackbone(
        vocabulary_size=100,
        num_layers=layers,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=32,
        intermediate_dim=64,
        head_dim=16,
    )


def llama(layers: int = 2) -> keras.Model:
    return keras_hub.models.LlamaBackbone(
        vocabulary_size=100,
        num_layers=layers,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=32,
        intermediate_dim=64,
    )


def vit(layers: int = 2) -> keras.Model:
    return keras_hub.models.ViTBackbone(
        image_shape=(32, 32, 3), patch_size=8, num_layers=layers, num_heads=2, hidden_dim=32, mlp_dim=64
    )


BACKBONES: dict[str, Callable[..., keras.Model]] = {
    "bert": bert,
    "distilbert": distilbert,
    "gpt2": gpt2,
    "gemma": gemma,
    "llama": llama,
    "vit": vit,
}
#: What no scheme covers, read from KerasHub's layers: a position table added to the token embeddings (a slice of a
#: weight, no matmul), and ViT's class token (a weight concatenated to the patches).
FLOAT = {
    "bert": ["position_embedding"],
    "distilbert": ["position_embedding"],
    "gpt2": ["position_embedding"],
    "gemma": [],
    "llama": [],
    "vit": ["class_token"],
}
SCHEMES: dict[str, Any] = {
    "int8": "int8",
    "int4_weight_only": lambda: ste.qat.NBitScheme(num_bits_weight=4, num_bits_activation=None),
    "ternary": "ternary",
}


def inputs(name: str, batch: int = 2, length: int = 16, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    if name == "vit":
        return rng.normal(size=(batch, 32, 32, 3)).astype(np.float32)
    x = {
        "token_ids": rng.integers(1, 100, (batch, length)).astype(np.int32),
        "padding_mask": np.ones((batch, length), np.int32),
    }
    if name == "bert":
        x["segment_ids"] = rng.integers(0, 2, (batch, length)).astype(np.int32)
    return x


def expected_coverage(model: keras.Model, name: str) -> float:
    """1 − (the values of the weights in ``FLOAT``) / (the values of every rank >= 2 weight but biases)."""
    weights = {id(v): v for v in model.weights if is_weight(v)}.values()
    total = sum(int(np.prod(v.shape)) for v in weights)
    uncovered = sum(int(np.prod(v.shape)) for v in weights if set(v.path.split("/")) & set(FLOAT[name]))
    return 1 - uncovered / total


def quantize(model: keras.Model, scheme: Any) -> tuple[keras.Model, Rewriter, list[str]]:
    """``ste.quantize_model(model, scheme)`` through its rewriter (to read the plan), with the warnings it gave."""
    job = Quantize(_scheme(scheme() if callable(scheme) else scheme))
    rewriter = Rewriter(job, None, False, graph_class=QuantizedGraph)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q = rewriter.run(model)
        rewriter.warn(stacklevel=1)
    return q, rewriter, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize("name", list(BACKBONES))
def test_int8_covers_each_backbone_and_names_what_stays_float(name):
    model = BACKBONES[name]()
    q, rewriter, messages = quantize(model, "int8")
    coverage = rewriter.plan.coverage
    assert coverage >= 0.95 and coverage == pytest.approx(expected_coverage(model, name), abs=1e-9)
    floats = [m for m in messages if "not covered" in m]
    assert len(floats) == len(messages) == (1 if FLOAT[name] else 0), messages
    x = inputs(name)
    q(x, training=True)
    float_out, quantized_out = model(x), q(x)
    for a, b in zip(keras.tree.flatten(float_out), keras.tree.flatten(quantized_out)):
        assert np.isfinite(np.asarray(b)).all() and np.asarray(a).shape == np.asarray(b).shape


@pytest.mark.parametrize("scheme", ["int4_weight_only", "ternary"])
def test_weight_only_and_ternary_plans_cover_each_backbone(scheme):
    """The plan (decided before anything is built) of every backbone; GPT-2 and Llama are also built and run."""
    for name, make in BACKBONES.items():
        model = make(layers=1)
        if name in ("gpt2", "llama"):
            q, rewriter, _ = quantize(model, SCHEMES[scheme])
            x = inputs(name)
            assert np.isfinite(np.asarray(keras.tree.flatten(q(x, training=True))[0])).all()
        else:
            job = Quantize(_scheme(SCHEMES[scheme]() if callable(SCHEMES[scheme]) else SCHEMES[scheme]))
            rewriter = Rewriter(job, None, False, graph_class=QuantizedGraph)
            rewriter.make_plan(model)
        assert rewriter.plan.coverage == pytest.approx(expected_coverage(model, name), abs=1e-9), name
        assert rewriter.plan.coverage >= 0.95, name


def test_cached_attention_keeps_its_class_and_its_cache():
    q, _, _ = quantize(gpt2(layers=1), "int8")
    attention = q.get_layer("transformer_layer_0")._self_attention_layer
    assert type(attention) is keras_hub.layers.CachedMultiHeadAttention
    assert all(
        type(getattr(attention, f"_{p}_dense")).__name__ == "QuantEinsumDense" for p in ("query", "key", "value")
    )
    x = np.random.default_rng(0).normal(size=(2, 5, 32)).astype(np.float32)
    mask = np.tril(np.ones((5, 5), bool))[None]
    full = attention(x, x, attention_mask=mask)
    cache = np.zeros((2, 2, 5, 2, 16), np.float32)
    cached, cache = attention(x, x, attention_mask=mask, cache=cache, cache_update_index=0)  # its own call
    np.testing.assert_allclose(cached, full, rtol=1e-5, atol=1e-6)
    assert cache.shape == (2, 2, 5, 2, 16)


@pytest.mark.parametrize("name", ["gemma", "llama"])
def test_gemma_and_llama_attention_matmuls_take_quantized_operands(name):
    model = BACKBONES[name](layers=1)
    q, _, _ = quantize(model, "int8")
    find = lambda m: next(layer for layer in m._flatten_layers() if "Attention" in type(layer).__name__)  # noqa: E731
    float_attention, attention = find(model), find(q)
    assert type(attention) is type(float_attention)
    softmax = next(layer for layer in attention._flatten_layers() if type(layer).__name__ == "QuantSoftmax")
    # the probabilities: TFLite's fixed softmax range, against numpy's softmax
    scores = np.random.default_rng(1).normal(size=(2, 1, 2, 4, 4)).astype(np.float32)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(
        softmax(scores), numpy_fake_quant(e / e.sum(-1, keepdims=True), 0.0, 255 / 256)[0], atol=1e-6
    )
    # query, key and value: the float layer's own attention on numpy fake-quantized operands (the softmax's
    # quantizer set aside)
    softmax.output_quantizer = None
    rng = np.random.default_rng(2)
    q_, k_, v_ = (rng.normal(size=(2, 4, n, 16)).astype(np.float32) * 3 for n in (2, 1, 1))  # 2 query heads, 1 kv
    mask = np.tril(np.ones((4, 4), bool))[None].repeat(2, 0)
    ranges = {role: getattr(attention, f"_ste_{role}_quantizer") for role in ("query", "key", "value")}
    for quantizer in ranges.values():  # ranges narrower than the operands, so that quantization shows
        quantizer.min.assign(-2.0)
        quantizer.max.assign(2.5)
    fq = {role: numpy_fake_quant(t, -2.0, 2.5)[0].astype(np.float32) for role, t in zip(ranges, (q_, k_, v_))}
    got = attention._compute_attention(q_, k_, v_, mask)
    want = float_attention._compute_attention(fq["query"], fq["key"], fq["value"], mask)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.abs(np.asarray(float_attention._compute_attention(q_, k_, v_, mask)) - np.asarray(want)).max() > 1e-2


# -- deployment -----------------------------------------------------------------------------------------------------

#: Ops that stay float in the int8 flatbuffers of these backbones (docs/qat.md lists each with its reason).
FLOAT_OPS = {
    # LayerNormalization, as TensorFlow lowers it (mean, variance, rsqrt, scale and shift)
    "MEAN",
    "SQUARED_DIFFERENCE",
    "RSQRT",
    "MUL",
    "ADD",
    "NEG",
    # the residual additions (ADD), the position table (SLICE, BROADCAST_TO) and GPT-2's causal mask (SHAPE, CAST,
    # RANGE, EXPAND_DIMS, GREATER_EQUAL) compute on float tensors; QUANTIZE/DEQUANTIZE are the edges of int8 runs
    "SLICE",
    "BROADCAST_TO",
    "SHAPE",
    "CAST",
    "RANGE",
    "EXPAND_DIMS",
    "GREATER_EQUAL",
    "RESHAPE",
    "QUANTIZE",
    "DEQUANTIZE",
    # a masked softmax (GPT-2's causal mask, BERT's padding mask): the mask is a float bias (SUB, MUL, ADD), so that
    # masked positions get probability 0, which an int8 softmax cannot give (ViT, without a mask: int8)
    "SUB",
    "SOFTMAX",
}
#: The largest difference between LiteRT's output and Keras's output of the QAT model, in steps of the head's
#: output quantizer (docs/qat.md: measured 2, 1 and 10 at these seeds). ViT's class token is a float weight that
#: the converter concatenates with the int8 patch embeddings, so it quantizes it on their scale, which the QAT
#: model does not; the LayerNorm of that small vector magnifies the difference.
STEPS = {"gpt2": 3, "bert": 2, "vit": 16}


def with_head(backbone: keras.Model, name: str) -> keras.Model:
    """A task model: a Dense head on the backbone's sequence output (BERT: its pooled output)."""
    x = backbone.input
    y = backbone(x)
    features = y["pooled_output"] if name == "bert" else y["sequence_output"] if isinstance(y, dict) else y
    return keras.Model(x, keras.layers.Dense(8, name="head")(features))


def run_litert(flatbuffer: bytes, x: Any) -> np.ndarray:
    it = interpreter(flatbuffer)
    details = it.get_input_details()
    feeds = x if isinstance(x, dict) else {"images": x}
    rows = len(next(iter(feeds.values())))
    for detail in details:
        value = next(v for key, v in feeds.items() if f"_{key}:" in detail["name"])
        it.resize_tensor_input(detail["index"], (1, *value.shape[1:]))
    it.allocate_tensors()
    results = []
    for row in range(rows):
        for detail in details:
            value = next(v for key, v in feeds.items() if f"_{key}:" in detail["name"])
            it.set_tensor(detail["index"], value[row : row + 1].astype(detail["dtype"]))
        it.invoke()
        results.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
    return np.concatenate(results)


def calibrate(q: keras.Model, x: Any) -> None:
    """Set each moving-average range to the batch's (one training call with decay 0), as a trained model's are."""
    moving = [layer for layer in q._flatten_layers() if isinstance(layer, ste.qat.ActivationFakeQuant)]
    moving = [layer for layer in moving if layer.ema_decay < 1]
    for layer in moving:
        layer.ema_decay = 0.0
    q(x, training=True)
    for layer in moving:
        layer.ema_decay = 0.999


@pytest.mark.parametrize("name", ["gpt2", "bert", "vit"])
def test_int8_backbone_runs_in_litert_within_a_few_steps_of_keras(name):
    keras.utils.set_random_seed(0)
    model = with_head(BACKBONES[name](layers=1), name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the position table / class token stay float (tested above)
        q = ste.quantize_model(model)
    x = inputs(name, batch=8, length=8, seed=3)
    calibrate(q, x)
    flatbuffer = ste.to_tflite(q)
    found = ops(flatbuffer)
    for op, types, outputs in found:
        if op in ("FULLY_CONNECTED", "BATCH_MATMUL", "CONV_2D"):  # every matmul in int8, in and out
            assert types[:2] == ["int8", "int8"] and outputs == ["int8"], (op, types, outputs)
    new_float = {op for op, types, outputs in found if "float32" in types + outputs} - FLOAT_OPS
    assert not new_float, f"ops newly left in float: {sorted(new_float)} (list them in docs/qat.md with the reason)"
    quantizer = next(
        layer
        for layer in q.layers
        if isinstance(layer, ste.qat.ActivationFakeQuant) and layer.name.startswith("head_quant")
    )
    step = float(ste.qat.nudged_range(quantizer.min, quantizer.max, bits=8, narrow_range=False)[2])
    steps = np.abs(run_litert(flatbuffer, x) - np.asarray(q.predict(x, verbose=0))) / step
    assert steps.max() <= STEPS[name] + 1e-3, steps.max()


def test_weights_of_a_backbone_changed_in_place_round_trip(tmp_path):
    """``model.save`` writes the backbone's own config (the float backbone); its weights load into the same
    rewrite of the same float backbone, exactly."""
    keras.utils.set_random_seed(1)
    float_model = gpt2(layers=1)
    q, _, _ = quantize(float_model, "int8")
    x = inputs("gpt2")
    q(x, training=True)
    q.save_weights(tmp_path / "qat.weights.h5")
    again, _, _ = quantize(float_model, "int8")
    again.load_weights(tmp_path / "qat.weights.h5")
    np.testing.assert_array_equal(np.asarray(again(x)), np.asarray(q(x)))


@pytest.mark.parametrize("policy", ["float16", "bfloat16", "float32", "float64"])
def test_a_backbone_changed_in_place_computes_in_every_float_dtype(policy):
    """Gemma (attention quantized inside, layers quantizing their own inputs and outputs) in each dtype: the same
    dtype out, finite, and the same function as in float32 (within the dtype's steps); XLA in float32."""
    reference = float32_gemma()
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(2)
        q, _, _ = quantize(gemma(layers=1), "int8")
    finally:
        keras.config.set_dtype_policy("float32")
    q.set_weights(reference.get_weights())
    x = inputs("gemma", length=8)
    eager = q(x)
    assert keras.backend.standardize_dtype(eager.dtype) == policy
    want = np.asarray(reference(x))
    outputs = [eager, tf_function(q)(x)] if policy == "float32" else [eager]
    for got in outputs:
        got = np.asarray(keras.ops.cast(got, "float32"))
        assert np.isfinite(got).all()
        # a few activation steps apart at most in half precision (a level can flip where float32 sits on a tie)
        assert np.mean(np.abs(got - want) < 0.05 * np.abs(want).max()) > 0.95


@functools.cache
def float32_gemma() -> keras.Model:
    keras.utils.set_random_seed(2)
    return quantize(gemma(layers=1), "int8")[0]


def tf_function(model: keras.Model) -> Callable[[Any], Any]:
    import tensorflow as tf

    return tf.function(lambda x: model(x), jit_compile=True)
