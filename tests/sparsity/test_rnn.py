"""Pruning SimpleRNN, LSTM, GRU and keras.layers.RNN over their cells: TFMOT's prune_registry prunes each cell's
``kernel`` and ``recurrent_kernel`` (``_RNN_CELLS_WEIGHTS_MAP``), and its wrapper keeps one mask per pruned weight
(``pruning_wrapper.build``), over the gates side by side. Masks against numpy (the smallest |w| of the whole weight
zeroed), the output against Keras's own layer holding the masked weights and, for SimpleRNN, against a numpy
recurrence; in every float dtype; N:M along the input rows; fit, save, load and strip."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .test_masks import distinct, numpy_kept, numpy_mask, numpy_n_by_m

S = ste.sparsity
L = keras.layers
DTYPES = ["float16", "bfloat16", "float32", "float64"]
TOLERANCE = {"float16": 5e-3, "bfloat16": 5e-2, "float32": 1e-5, "float64": 1e-12}
GATES = {"SimpleRNN": 1, "LSTM": 4, "GRU": 3}


def train_once(model: keras.Model, x: np.ndarray) -> None:
    """One training call in a custom loop (the callback driven as TFMOT's guide drives it), no weight update."""
    callback = S.UpdatePruningStep()
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_train_batch_begin(batch=0)
    model(x, training=True)


def as64(value) -> np.ndarray:
    return tf.cast(value, tf.float64).numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["SimpleRNN", "LSTM", "GRU"])
def test_each_rnn_weight_gets_one_mask_by_magnitude_and_the_layer_runs_on_the_masked_weights(kind, dtype) -> None:
    units, inputs = 8, 4
    # (Keras's default orthogonal recurrent initializer has no bfloat16 kernel; the weights are set below anyway)
    layer = getattr(L, kind)(units, return_sequences=True, dtype=dtype, recurrent_initializer="zeros", name="rnn")
    model = keras.Sequential([keras.Input((5, inputs)), layer])
    cell = layer.cell
    kernel, recurrent = distinct((inputs, GATES[kind] * units), 1), distinct((units, GATES[kind] * units), 2)
    cell.kernel.assign(kernel / 8)  # distinct magnitudes, exact in every dtype (multiples of 1/512)
    cell.recurrent_kernel.assign(recurrent / 8)
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.6, 0, frequency=1))
    wrapper = pruned.layers[0]
    assert [w.path.split("/")[-1] for w in wrapper.get_prunable_weights()] == ["kernel", "recurrent_kernel"]
    x = np.random.default_rng(3).normal(size=(3, 5, inputs)).astype(np.float32)
    train_once(pruned, tf.constant(x, dtype))
    masks = [m.numpy().astype(bool) for _, m, _ in wrapper.pruning_vars]
    for mask, weight in zip(masks, (kernel, recurrent)):
        np.testing.assert_array_equal(mask, numpy_mask(weight, 0.6))  # the whole weight, gates side by side
        assert (~mask).sum() == weight.size - numpy_kept(weight.size, 0.6)
    reference = getattr(L, kind)(units, return_sequences=True, dtype=dtype, recurrent_initializer="zeros")
    reference.build((None, 5, inputs))
    values = [w.numpy() for w in layer.weights]
    values[0], values[1] = kernel / 8 * masks[0], recurrent / 8 * masks[1]
    reference.set_weights(values)
    expected = as64(reference(tf.constant(x, dtype)))
    got = as64(pruned(tf.constant(x, dtype)))
    np.testing.assert_allclose(got, expected, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])
    assert np.abs(as64(model(tf.constant(x, dtype))) - expected).max() > 0.1  # the masks change the output


def test_simple_rnn_against_a_numpy_recurrence() -> None:
    layer = L.SimpleRNN(6, return_sequences=True, dtype="float64")
    model = keras.Sequential([keras.Input((7, 3), dtype="float64"), layer])
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1))
    x = np.random.default_rng(4).normal(size=(2, 7, 3))
    train_once(pruned, x)
    (_, kernel_mask, _), (_, recurrent_mask, _) = pruned.layers[0].pruning_vars
    k = layer.cell.kernel.numpy() * kernel_mask.numpy()
    r = layer.cell.recurrent_kernel.numpy() * recurrent_mask.numpy()
    h, outputs = np.zeros((2, 6)), []
    for t in range(7):
        h = np.tanh(x[:, t] @ k + h @ r + layer.cell.bias.numpy())
        outputs.append(h)
    np.testing.assert_allclose(pruned(x).numpy(), np.stack(outputs, axis=1), rtol=1e-12, atol=1e-12)


def test_one_mask_over_the_gates_is_tfmots_rule() -> None:
    """An LSTM kernel whose forget-gate columns are all small loses them all (one mask over the gates, TFMOT's); a
    per-gate rule would keep half of them."""
    layer = L.LSTM(4)
    model = keras.Sequential([keras.Input((3, 4)), layer])
    kernel = np.ones((4, 16), np.float32) + np.arange(64, dtype=np.float32).reshape(4, 16) / 100
    kernel[:, 4:8] = 0.001 * (1 + np.arange(16, dtype=np.float32).reshape(4, 4))  # gates i, f, c, o: f is small
    layer.cell.kernel.assign(kernel)
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.25, 0, frequency=1))
    train_once(pruned, np.ones((1, 3, 4), np.float32))
    mask = pruned.layers[0].pruning_vars[0][1].numpy().astype(bool)
    np.testing.assert_array_equal(mask, numpy_mask(kernel, 0.25))
    assert not mask[:, 4:8].any() and mask[:, :4].all() and mask[:, 8:].all()


def test_stacked_cells_and_n_by_m_along_the_input_rows() -> None:
    keras.utils.set_random_seed(5)
    layer = L.RNN([L.LSTMCell(8), L.GRUCell(4)], return_sequences=True)
    model = keras.Sequential([keras.Input((3, 8)), layer])
    weights = [w.numpy().copy() for cell in layer.cell.cells for w in (cell.kernel, cell.recurrent_kernel)]
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1), sparsity_m_by_n=(2, 4))
    assert len(pruned.layers[0].get_prunable_weights()) == 4  # kernel and recurrent kernel of each cell
    train_once(pruned, np.ones((2, 3, 8), np.float32))
    for (_, mask, _), weight in zip(pruned.layers[0].pruning_vars, weights):
        np.testing.assert_array_equal(mask.numpy().astype(bool), numpy_n_by_m(weight, 2, 4, axis=0))


def test_a_pruned_lstm_fits_saves_loads_and_strips(tmp_path) -> None:
    keras.utils.set_random_seed(6)
    model = keras.Sequential([keras.Input((6, 4)), L.LSTM(8), L.Dense(2)])
    pruned = S.prune_low_magnitude(model, S.PolynomialDecay(0.0, 0.75, 0, 4, power=1, frequency=1))
    pruned.compile(keras.optimizers.Adam(0.01), "mse")
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(32, 6, 4)).astype(np.float32), rng.normal(size=(32, 2)).astype(np.float32)
    pruned.fit(x, y, batch_size=8, verbose=0, callbacks=[S.UpdatePruningStep()])
    wrapper = pruned.layers[0]
    for _, mask, _ in wrapper.pruning_vars:
        assert (mask.numpy() == 0).sum() == mask.numpy().size - numpy_kept(mask.numpy().size, 0.75)
    pruned.save(str(tmp_path / "lstm.keras"))
    loaded = keras.models.load_model(str(tmp_path / "lstm.keras"))
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), pruned.predict(x, verbose=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the schedule's target is reached: no warning
        stripped = S.strip_pruning(loaded)
    lstm = stripped.layers[0]
    assert type(lstm) is L.LSTM
    for weight, (_, mask, _) in zip((lstm.cell.kernel, lstm.cell.recurrent_kernel), wrapper.pruning_vars):
        np.testing.assert_array_equal(weight.numpy() == 0, ~mask.numpy().astype(bool))
    np.testing.assert_allclose(stripped.predict(x, verbose=0), pruned.predict(x, verbose=0), rtol=1e-5, atol=1e-6)


class PlainCell(L.Layer):
    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        self.units, self.state_size = units, units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), name="kernel")

    def call(self, x, states):
        h = keras.ops.tanh(x @ self.kernel + states[0])
        return h, [h]


class PrunableCell(PlainCell, S.PrunableLayer):
    def get_prunable_weights(self):
        return [self.kernel]


def test_a_cell_of_your_own_needs_get_prunable_weights() -> None:
    with pytest.raises(ste.errors.UnsupportedLayerError, match=r"PlainCell.*Fix: .*get_prunable_weights\(\)"):
        S.prune_low_magnitude(L.RNN(PlainCell(4)))
    wrapper = S.prune_low_magnitude(L.RNN(PrunableCell(4)), S.ConstantSparsity(0.5, 0, frequency=1))
    model = keras.Sequential([keras.Input((3, 4)), wrapper])
    kernel = wrapper.layer.cell.kernel.numpy().copy()
    train_once(model, np.ones((1, 3, 4), np.float32))
    np.testing.assert_array_equal(wrapper.pruning_vars[0][1].numpy().astype(bool), numpy_mask(kernel, 0.5))


def test_bidirectional_is_not_covered_as_in_tfmot() -> None:
    with pytest.raises(ste.errors.UnsupportedLayerError, match="Bidirectional"):
        S.prune_low_magnitude(L.Bidirectional(L.LSTM(4)))
