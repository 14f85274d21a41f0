"""Encoders, readouts and the rate-coded loss against numpy formulas (snnTorch's definitions)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste


def test_rate_encode_is_bernoulli_and_seeded() -> None:
    p = np.array([[0.0, 0.1, 0.5, 0.9, 1.0, 1.7]], dtype="float32")
    a = ste.spiking.rate_encode(np.repeat(p, 400, 0), 50, seed=7).numpy()
    assert a.shape == (400, 50, 6) and a.dtype == np.float32 and set(np.unique(a)) <= {0.0, 1.0}
    np.testing.assert_array_equal(a, ste.spiking.rate_encode(np.repeat(p, 400, 0), 50, seed=7).numpy())
    assert not np.array_equal(a, ste.spiking.rate_encode(np.repeat(p, 400, 0), 50, seed=8).numpy())
    rate = a.mean(axis=(0, 1))
    expected = np.clip(p[0], 0, 1)
    # 20 000 Bernoulli draws per column: 5 standard deviations of the mean is at most 0.018
    np.testing.assert_allclose(rate, expected, atol=0.018)
    half = ste.spiking.rate_encode(np.full((200, 3), 0.4, "float32"), 50, gain=0.5, seed=1).numpy().mean()
    assert abs(half - 0.2) < 0.02


def test_latency_encode_matches_the_rc_formula() -> None:
    x = np.array([[0.005, 0.02, 0.1, 0.5, 1.0]], dtype="float64")
    out = ste.spiking.latency_encode(x, 10, tau=5.0, threshold=0.01).numpy()
    assert out.shape == (1, 10, 5) and out.sum(axis=1).tolist() == [[0, 1, 1, 1, 1]]
    with np.errstate(divide="ignore", invalid="ignore"):
        times = np.clip(np.round(5.0 * np.log(x / (x - 0.01))), 0, 9)
    np.testing.assert_array_equal(out[0].argmax(axis=0)[1:], times[0, 1:])
    linear = ste.spiking.latency_encode(np.array([[0.0, 0.5, 1.0]]), 5, linear=True, threshold=1e-9).numpy()
    np.testing.assert_array_equal(linear[0].argmax(axis=0)[1:], [2, 0])


def test_delta_encode_matches_numpy() -> None:
    x = np.array([[[0.0], [0.2], [0.25], [0.1], [0.5]]])
    diff = np.diff(np.concatenate([np.zeros((1, 1, 1)), x], 1), axis=1)
    np.testing.assert_array_equal(ste.spiking.delta_encode(x, threshold=0.1).numpy(), (diff >= 0.1).astype(float))
    off = ste.spiking.delta_encode(x, threshold=0.1, off_spike=True).numpy()
    np.testing.assert_array_equal(off, (diff >= 0.1).astype(float) - (diff <= -0.1))
    padded = ste.spiking.delta_encode(x + 1.0, threshold=0.1, padding=True).numpy()
    assert padded[0, 0, 0] == 0.0  # first step compared with itself


def test_readouts_match_numpy() -> None:
    seq = np.random.default_rng(0).normal(size=(3, 7, 4)).astype("float32")
    for mode, fn, ref in [
        ("count", ste.spiking.spike_count, seq.sum(1)),
        ("rate", ste.spiking.spike_rate, seq.mean(1)),
        ("last", ste.spiking.last_membrane, seq[:, -1]),
        ("max", ste.spiking.max_membrane, seq.max(1)),
    ]:
        np.testing.assert_allclose(fn(seq).numpy(), ref, rtol=1e-6)
        layer = ste.spiking.Readout(mode)
        np.testing.assert_allclose(layer(seq).numpy(), ref, rtol=1e-6)
        assert ste.spiking.Readout.from_config(layer.get_config()).mode == mode
    with pytest.raises(ste.errors.ParameterError):
        ste.spiking.Readout("mean")


def _log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def test_rate_cross_entropy_is_the_mean_per_step_cross_entropy() -> None:
    rng = np.random.default_rng(1)
    spikes = (rng.random((5, 6, 4)) < 0.4).astype("float32")
    y = rng.integers(0, 4, size=5)
    per_step = -np.take_along_axis(_log_softmax(spikes.astype("float64")), y[:, None, None].repeat(6, 1), -1)[..., 0]
    np.testing.assert_allclose(ste.spiking.rate_cross_entropy(y, spikes).numpy(), per_step.mean(1), rtol=1e-6)
    counts = spikes.sum(1).astype("float64")
    by_count = -_log_softmax(counts)[np.arange(5), y]
    np.testing.assert_allclose(ste.spiking.rate_cross_entropy(y, spikes, from_counts=True).numpy(), by_count, rtol=1e-6)
    one_hot = np.eye(4)[y]
    np.testing.assert_allclose(
        ste.spiking.rate_cross_entropy(one_hot, spikes, sparse=False).numpy(), per_step.mean(1), rtol=1e-6
    )
    loss = ste.spiking.RateCrossEntropy()
    np.testing.assert_allclose(float(loss(y, spikes)), per_step.mean(), rtol=1e-6)
    assert isinstance(keras.losses.deserialize(keras.losses.serialize(loss)), ste.spiking.RateCrossEntropy)


def test_encoder_errors() -> None:
    with pytest.raises(ste.errors.ParameterError):
        ste.spiking.rate_encode(np.zeros((2, 3)), 0)
    with pytest.raises(ste.errors.CallError):
        ste.spiking.rate_encode(tf.constant(0.5), 3)
    with pytest.raises(ste.errors.CallError):
        ste.spiking.delta_encode(np.zeros((3,)))
