"""Which layers prune_low_magnitude covers: Keras's own classes, matched exactly as TFMOT's prune_registry matches
them (``layer.__class__ in _LAYERS_WEIGHTS_MAP``), ste's own subclasses of them, and layers that say what to prune
(PrunableLayer). A subclass of a Keras layer that says nothing is refused with the fix, by ste.sparsity and by
ste.clustering alike."""

from __future__ import annotations

import inspect
import warnings

import keras
import numpy as np
import pytest

import ste
import ste.layers
import ste.qat
from ste.clustering._clusterable import clusterable_weights, covered, has_kernel
from ste.sparsity._layers import is_prunable, prunable_weights

S = ste.sparsity
L = keras.layers


class ScaledDense(L.Dense):
    """Computes something else with its kernel: TFMOT refuses it, so does ste."""

    def call(self, inputs):
        return super().call(inputs) * 2.0


class PrunableScaledDense(ScaledDense, S.PrunableLayer):
    def get_prunable_weights(self):
        return [self.kernel]


def test_a_subclass_of_a_keras_layer_is_refused_with_the_fix() -> None:
    with pytest.raises(ste.errors.UnsupportedLayerError) as info:
        S.prune_low_magnitude(ScaledDense(4))
    message = str(info.value)
    assert "'scaled_dense' (ScaledDense) subclasses keras.layers.Dense" in message
    assert "Fix: derive it from ste.sparsity.PrunableLayer" in message and "[self.kernel]" in message
    with pytest.raises(ste.errors.UnsupportedLayerError, match="ScaledDense"):
        S.PruneLowMagnitude(ScaledDense(4))  # the wrapper built directly too
    model = keras.Sequential([keras.Input((8,)), ScaledDense(4, name="scaled"), L.Dense(2, name="plain")])
    with pytest.warns(UserWarning, match="scaled"):
        pruned = S.prune_low_magnitude(model)
    assert [type(layer).__name__ for layer in pruned.layers] == ["ScaledDense", "PruneLowMagnitude"]


def test_a_subclass_that_says_what_to_prune_is_pruned() -> None:
    layer = PrunableScaledDense(4)
    wrapper = S.prune_low_magnitude(layer, S.ConstantSparsity(0.5, 0, frequency=1))
    model = keras.Sequential([keras.Input((8,)), wrapper])
    layer = wrapper.layer  # a copy: the layer given stays as it is
    kernel = layer.kernel.numpy().copy()
    callback = S.UpdatePruningStep()
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_train_batch_begin(0)
    out = model(np.ones((1, 8), np.float32), training=True).numpy()
    mask = wrapper.pruning_vars[0][1].numpy().astype(bool)
    assert (~mask).sum() == kernel.size // 2
    np.testing.assert_allclose(out, 2.0 * (np.ones((1, 8)) @ (kernel * mask)), rtol=1e-5, atol=1e-6)  # its call


def _ste_subclasses_of(bases: tuple[type, ...]) -> list[type]:
    found = []
    for module in (ste.layers, ste.qat):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, bases) and cls not in bases and cls.__module__.startswith("ste."):
                found.append(cls)
    return sorted(set(found), key=lambda cls: cls.__name__)


PRUNED_KERAS = (
    L.Dense, L.Conv1D, L.Conv2D, L.Conv3D, L.Conv1DTranspose, L.Conv2DTranspose, L.Conv3DTranspose, L.EinsumDense,
    L.DepthwiseConv1D, L.DepthwiseConv2D, L.SeparableConv1D, L.SeparableConv2D, L.Embedding, L.MultiHeadAttention,
)  # fmt: skip
EXAMPLES = {
    "QuantDense": lambda cls: cls(4),
    "QuantEinsumDense": lambda cls: cls("ab,bc->ac", output_shape=4),
    "QuantEmbedding": lambda cls: cls(10, 4),
    "QuantMultiHeadAttention": lambda cls: cls(2, 4),
}


@pytest.mark.parametrize("cls", _ste_subclasses_of(PRUNED_KERAS), ids=lambda cls: cls.__name__)
def test_every_ste_subclass_of_a_covered_keras_layer_is_pruned(cls: type) -> None:
    """ste.layers' quantized layers and ste.qat's QuantEinsumDense, QuantEmbedding, QuantMultiHeadAttention read
    their parent's weights: covered, with the parent's weights."""
    make = EXAMPLES.get(cls.__name__, lambda cls: cls(4, 3))
    layer = make(cls)
    assert is_prunable(layer), cls
    S.prune_low_magnitude(layer)  # accepted


def test_ste_quantized_layers_prune_their_parents_weights() -> None:
    dense = ste.layers.QuantDense(4)
    dense.build((None, 8))
    assert prunable_weights(dense) == [dense.kernel]
    embedding = ste.qat.QuantEmbedding(10, 4)
    embedding.build((None, 3))
    assert prunable_weights(embedding) == [embedding.embeddings]


def test_clustering_and_pruning_tables_agree_on_subclasses() -> None:
    """The same rule in both tables: a Keras class is covered, a user's subclass of it is not, ste's is."""
    for keras_layer, ste_layer, subclass in (
        (L.Dense(4), ste.layers.QuantDense(4), ScaledDense(4)),
        (L.Conv2D(4, 3), ste.layers.QuantConv2D(4, 3), type("MyConv", (L.Conv2D,), {"call": L.Conv2D.call})(4, 3)),
    ):
        assert is_prunable(keras_layer) and has_kernel(keras_layer) and covered(keras_layer)
        assert is_prunable(ste_layer) and has_kernel(ste_layer) and covered(ste_layer)
        assert not is_prunable(subclass) and not has_kernel(subclass) and not covered(subclass)


def test_a_subclass_that_overrides_nothing_is_covered_as_its_parent() -> None:
    """KerasHub's ReversibleEmbedding is ``class ReversibleEmbedding(keras.layers.ReversibleEmbedding): pass``: it
    computes as its parent with the same weights, so both tables cover it as they cover the parent."""
    renamed = type("Renamed", (L.Embedding,), {})(10, 4)
    renamed.build((None, 3))
    assert is_prunable(renamed) and has_kernel(renamed) and covered(renamed)
    assert prunable_weights(renamed) == [renamed.embeddings]
    assert [variable for _, variable in clusterable_weights(renamed)] == [renamed.embeddings]
    overriding = type("Built", (L.Embedding,), {"build": L.Embedding.build})(10, 4)  # says it does more: refused
    assert not is_prunable(overriding) and not has_kernel(overriding)
    if hasattr(L, "ReversibleEmbedding"):  # Keras 3.13+
        untied = type("HubReversible", (L.ReversibleEmbedding,), {})(10, 4, tie_weights=False)
        untied.build((None, 3))
        assert prunable_weights(untied) == [untied.embeddings, untied.reverse_embeddings]
        assert [name for name, _ in clusterable_weights(untied)] == ["embeddings", "reverse_embeddings"]


def test_a_quantized_dense_is_clustered() -> None:
    keras.utils.set_random_seed(2)
    layer = ste.layers.QuantDense(6, kernel_quantizer=None)
    layer.build((None, 8))
    clustered = ste.clustering.cluster_weights(layer, number_of_clusters=3)
    x = np.random.default_rng(3).normal(size=(2, 8)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        out = clustered(x).numpy()
    ((variable, value),) = clustered.clustered_values()
    assert variable is clustered.layer.kernel and clustered.layer is not layer  # a copy: the layer given is unchanged
    assert np.unique(value.numpy()).size <= 3
    np.testing.assert_allclose(out, x @ value.numpy() + layer.bias.numpy(), rtol=1e-5, atol=1e-6)
