"""The fast part of ``python -m benchmarks.model_zoo``: a keras.applications model with operation nodes
(MobileNetV3Small) and six KerasHub backbones (BERT, DistilBERT, GPT-2, Gemma, Llama, ViT; one block, random weights,
nothing downloaded) through int8, int4 weight-only and ternary QAT, pruning and clustering, each without an error and
covering at least 95 % of the model's weight values (rank >= 2, biases left out).

The coverage is counted by numpy on what each transformation gives, never by the rewriter's plan: for pruning, the
values of the stripped model's weights that hold at least half zeros after one training step at 50 % sparsity; for
clustering, those of the stripped weights with at most 4 distinct values; for QAT, those of the weights that a layer
reads through a quantizer that changes them and leaves at most 2^bits distinct values per channel (along some axis),
at the bits the layer states (at most 8; 4 for int4 weight-only). Stripping gives back the model's class (a KerasHub
backbone stays one), and a stripped backbone saves to ``.keras`` and loads; one changed in place but not stripped
refuses to be saved, naming the fix. keras-hub is a test dependency only: without it the backbones are skipped."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest

import ste

S, C = ste.sparsity, ste.clustering

try:
    import keras_hub
except ImportError:  # a test dependency only (pip install -e ".[zoo]")
    keras_hub = None

_TEXT = {"vocabulary_size": 64, "num_layers": 1, "hidden_dim": 16, "intermediate_dim": 32}
_DECODER = {**_TEXT, "num_query_heads": 2, "num_key_value_heads": 1}


def _hub(make: Callable[[Any], keras.Model]) -> Callable[[], keras.Model]:
    def built() -> keras.Model:
        if keras_hub is None:
            pytest.skip("keras-hub is not installed (a test dependency: pip install -e '.[zoo]')")
        return make(keras_hub.models)

    return built


MODELS: dict[str, Callable[[], keras.Model]] = {
    "MobileNetV3Small": lambda: keras.applications.MobileNetV3Small(
        weights=None, input_shape=(32, 32, 3), classes=10, alpha=0.75, minimalistic=False
    ),
    "BertBackbone": _hub(lambda m: m.BertBackbone(**_TEXT, num_heads=2, max_sequence_length=8)),
    "DistilBertBackbone": _hub(lambda m: m.DistilBertBackbone(**_TEXT, num_heads=2, max_sequence_length=8)),
    "GPT2Backbone": _hub(lambda m: m.GPT2Backbone(**_TEXT, num_heads=2, max_sequence_length=8)),
    "GemmaBackbone": _hub(lambda m: m.GemmaBackbone(**_DECODER, head_dim=8)),
    "LlamaBackbone": _hub(lambda m: m.LlamaBackbone(**_DECODER)),
    "ViTBackbone": _hub(
        lambda m: m.ViTBackbone(
            image_shape=(16, 16, 3), patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32
        )
    ),
}

INT4 = ste.qat.NBitScheme(num_bits_weight=4, num_bits_activation=None)
TRANSFORMS: dict[str, Callable[[keras.Model], keras.Model]] = {
    "int8": lambda model: ste.quantize_model(model),
    "int4": lambda model: ste.quantize_model(model, INT4),
    "ternary": lambda model: ste.quantize_model(model, "ternary"),
    "prune": lambda model: S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1)),
    "cluster": lambda model: C.cluster_weights(model, 4, "LINEAR"),
}
#: the most bits a QAT layer may state for its kernel (ternary keeps the embeddings and the last layers at 8)
MOST_BITS = {"int8": 8, "int4": 4, "ternary": 8}


def inputs(model: keras.Model) -> Any:
    rng = np.random.default_rng(0)

    def one(tensor: Any, name: str = "") -> np.ndarray:
        shape = (2, *[dim or 8 for dim in tensor.shape[1:]])
        if "int" in str(tensor.dtype):  # token ids; masks and segment ids are 0 or 1
            return rng.integers(1, 60 if name == "token_ids" else 2, shape).astype(str(tensor.dtype))
        return rng.uniform(0, 1, shape).astype("float32")

    if isinstance(model.input, dict):
        return {name: one(tensor, name) for name, tensor in model.input.items()}
    return one(model.inputs[0])


def is_weight(variable: Any) -> bool:
    return len(variable.shape) >= 2 and "bias" not in variable.path.rsplit("/", 1)[-1]


def total_values(model: keras.Model) -> int:
    return sum(int(np.prod(v.shape)) for v in {id(v): v for v in model.weights}.values() if is_weight(v))


def stripped_share(stripped: keras.Model, passes: Callable[[np.ndarray], bool], total: int) -> float:
    values = [v.numpy() for v in {id(v): v for v in stripped.weights}.values() if is_weight(v)]
    return sum(value.size for value in values if passes(value)) / total


def on_a_grid(value: np.ndarray, levels: int) -> bool:
    """At most ``levels`` distinct values per channel, for channels along some axis (per tensor passes too)."""
    for axis in range(value.ndim):
        slices = np.moveaxis(value, axis, 0).reshape(value.shape[axis], -1)  # one channel: one index on the axis
        fibers = np.moveaxis(value, axis, -1).reshape(-1, value.shape[axis])  # one channel: the other axes' indices
        for groups in (slices, fibers):
            if all(np.unique(group).size <= levels for group in groups):
                return True
    return False


def quantized_share(result: keras.Model, total: int, most_bits: int) -> float:
    seen: set[int] = set()
    covered = 0
    for layer in result._flatten_layers():
        if getattr(type(layer), "quantized_kernels", None) is None or not layer.built:
            continue
        precisions = layer.kernel_precisions
        for name, value in layer.quantized_kernels.items():
            latent = getattr(layer, name)
            bits = precisions.get(name)
            if id(latent) in seen or not is_weight(latent) or bits is None or bits > most_bits:
                continue
            seen.add(id(latent))
            quantized = np.asarray(keras.ops.convert_to_numpy(value))
            if not np.array_equal(quantized, latent.numpy()) and on_a_grid(quantized, 2**bits):
                covered += quantized.size
    return covered / total


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("name", list(MODELS))
def test_each_model_is_covered_by_numpys_count(name: str, transform: str) -> None:
    keras.utils.set_random_seed(0)
    model = MODELS[name]()
    x = inputs(model)
    total = total_values(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # what stays float is named in a warning: tested elsewhere
        result = TRANSFORMS[transform](model)
    keras.tree.map_structure(np.asarray, result(x))  # it runs
    if transform == "prune":
        callback = S.UpdatePruningStep()  # one training step of a custom loop: the masks are set at step 0
        callback.set_model(result)
        callback.on_train_begin()
        callback.on_train_batch_begin(0)
        result(x, training=True)
        stripped = S.strip_pruning(result)
        share = stripped_share(stripped, lambda value: (value == 0).sum() >= value.size // 2, total)
    elif transform == "cluster":
        stripped = C.strip_clustering(result)
        share = stripped_share(stripped, lambda value: np.unique(value).size <= 4, total)
    else:
        stripped = None
        share = quantized_share(result, total, MOST_BITS[transform])
    if stripped is not None:
        assert type(stripped) is type(model)
        keras.tree.map_structure(np.asarray, stripped(x))
    assert share >= 0.95, f"{name} {transform}: numpy finds {share:.1%} of the weight values transformed"


@pytest.mark.parametrize("transform", ["prune", "cluster"])
def test_a_stripped_backbone_saves_and_loads_and_an_unstripped_one_names_the_fix(transform: str, tmp_path) -> None:
    keras.utils.set_random_seed(1)
    model = MODELS["GPT2Backbone" if transform == "prune" else "BertBackbone"]()
    x = inputs(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = TRANSFORMS[transform](model)
    strip = S.strip_pruning if transform == "prune" else C.strip_clustering
    with pytest.raises(ste.errors.SerializationError, match=rf"{strip.__name__}\(model\).save.*save_weights"):
        result.save(tmp_path / "unstripped.keras")
    stripped = strip(result)
    stripped.save(tmp_path / "stripped.keras")
    loaded = keras.saving.load_model(tmp_path / "stripped.keras")
    assert type(loaded) is type(model)
    keras.tree.map_structure(
        lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), loaded(x), stripped(x)
    )


def test_a_quantized_backbone_refuses_a_keras_file_and_saves_its_weights(tmp_path) -> None:
    keras.utils.set_random_seed(2)
    model = MODELS["BertBackbone"]()
    x = inputs(model)
    q = ste.quantize_model(model)
    with pytest.raises(ste.errors.SerializationError, match="QuantEinsumDense|Quant.*save_weights") as info:
        keras.saving.save_model(q, tmp_path / "q.keras")
    assert "Fix:" in str(info.value) and not (tmp_path / "q.keras").exists()
    q.save_weights(tmp_path / "q.weights.h5")
    again = ste.quantize_model(model)
    again.load_weights(tmp_path / "q.weights.h5")
    keras.tree.map_structure(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), again(x), q(x))
