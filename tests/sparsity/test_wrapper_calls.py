"""A pruned layer is called as the layer it wraps: keyword inputs (``mha(query=..., value=...)``), an unbuilt
MultiHeadAttention built from every input of its first call, ``input_shape`` on the first layer of a Sequential
(TFMOT's wrapper copies ``_batch_input_shape`` for that). References: Keras's own layer holding the masked kernels."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest

import ste

from .test_masks import numpy_kept

S = ste.sparsity
L = keras.layers
RNG = np.random.default_rng(0)
Q = RNG.normal(size=(2, 3, 8)).astype(np.float32)
V = RNG.normal(size=(2, 5, 6)).astype(np.float32)
MASK = np.ones((2, 3, 5), bool)
MASK[:, :, -1] = False


def trained_once(wrapper, *args, **kwargs) -> None:
    """One training call, the callback driven by hand (it finds the wrapper in any model holding it)."""
    callback = S.UpdatePruningStep()
    callback.set_model(keras.Sequential([wrapper]))
    callback.on_train_begin()
    callback.on_train_batch_begin(0)
    wrapper(*args, training=True, **kwargs)


def reference_mha(wrapper) -> L.MultiHeadAttention:
    """A plain MultiHeadAttention of the wrapped one's config holding its masked kernels."""
    inner = wrapper.layer
    plain = L.MultiHeadAttention.from_config(inner.get_config())
    plain.build_from_config(inner.get_build_config())
    masks = {id(weight): mask.numpy() for weight, mask, _ in wrapper.pruning_vars}
    plain.set_weights([w.numpy() * masks.get(id(w), 1) for w in inner.weights])
    return plain


def test_keyword_inputs_reach_the_wrapped_attention() -> None:
    keras.utils.set_random_seed(1)
    wrapper = S.prune_low_magnitude(L.MultiHeadAttention(2, 4), S.ConstantSparsity(0.5, 0, frequency=1))
    out, scores = wrapper(query=Q, value=V, key=V, attention_mask=MASK, return_attention_scores=True)
    assert out.shape == (2, 3, 8) and scores.shape == (2, 2, 3, 5)
    trained_once(wrapper, query=Q, value=V, attention_mask=MASK)
    for _, mask, _ in wrapper.pruning_vars:
        assert (mask.numpy() == 0).sum() == mask.numpy().size - numpy_kept(mask.numpy().size, 0.5)
    plain = reference_mha(wrapper)
    got, got_scores = wrapper(query=Q, value=V, key=V, attention_mask=MASK, return_attention_scores=True)
    want, want_scores = plain(query=Q, value=V, key=V, attention_mask=MASK, return_attention_scores=True)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_scores.numpy(), want_scores.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(wrapper(Q, V).numpy(), plain(Q, V).numpy(), rtol=1e-5, atol=1e-6)  # positional too


@pytest.mark.parametrize("call", ["positional", "keyword"])
def test_an_unbuilt_attention_is_built_from_every_input(call: str) -> None:
    """TFMOT's registry prunes MultiHeadAttention; its build takes query_shape and value_shape."""
    wrapper = S.prune_low_magnitude(L.MultiHeadAttention(2, 4, name="mha"))
    out = wrapper(Q, V) if call == "positional" else wrapper(query=Q, value=V)
    assert out.shape == (2, 3, 8) and wrapper.built and wrapper.layer.built
    assert wrapper.layer._query_dense.kernel.shape == (8, 2, 4)  # from the query's 8 features
    assert wrapper.layer._key_dense.kernel.shape == (6, 2, 4)  # from the value's 6 features
    assert len(wrapper.pruning_vars) == 4
    self_attention = S.prune_low_magnitude(L.MultiHeadAttention(2, 4))
    assert self_attention(Q, Q).shape == (2, 3, 8)


def test_a_functional_model_with_keyword_inputs_trains_saves_and_strips(tmp_path) -> None:
    keras.utils.set_random_seed(2)
    q, v = keras.Input((3, 8)), keras.Input((5, 6))
    wrapper = S.prune_low_magnitude(L.MultiHeadAttention(2, 4, name="mha"), S.ConstantSparsity(0.5, 0, frequency=1))
    model = keras.Model([q, v], wrapper(query=q, value=v))
    model.compile(keras.optimizers.SGD(0.01), "mse")
    model.fit([Q, V], np.zeros((2, 3, 8), np.float32), verbose=0, callbacks=[S.UpdatePruningStep()])
    model.save(str(tmp_path / "mha.keras"))
    loaded = keras.models.load_model(str(tmp_path / "mha.keras"))
    np.testing.assert_array_equal(loaded.predict([Q, V], verbose=0), model.predict([Q, V], verbose=0))
    plain = reference_mha(wrapper)
    np.testing.assert_allclose(model.predict([Q, V], verbose=0), plain(Q, V).numpy(), rtol=1e-5, atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        stripped = S.strip_pruning(loaded)
    np.testing.assert_allclose(stripped.predict([Q, V], verbose=0), plain(Q, V).numpy(), rtol=1e-5, atol=1e-6)


def test_input_shape_on_a_wrapped_first_layer_builds_the_sequential() -> None:
    """TFMOT's wrapper copies the layer's ``_batch_input_shape`` so that
    ``Sequential([prune_low_magnitude(Dense(2, input_shape=(3,)))])`` is built; Keras 3 reads ``_input_shape_arg``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras's advice to use keras.Input instead
        first = L.Dense(4, input_shape=(8,))
    model = keras.Sequential([S.prune_low_magnitude(first, S.ConstantSparsity(0.5, 0, frequency=1)), L.Dense(2)])
    assert model.built and model.input_shape == (None, 8)
    model.compile(keras.optimizers.SGD(0.01), "mse")
    model.fit(np.ones((4, 8), np.float32), np.ones((4, 2), np.float32), verbose=0, callbacks=[S.UpdatePruningStep()])
    assert (model.layers[0].pruning_vars[0][1].numpy() == 0).sum() == 16
    stripped = S.strip_pruning(model)  # a built Sequential: the model route takes it
    assert (stripped.layers[0].kernel.numpy() == 0).sum() == 16
