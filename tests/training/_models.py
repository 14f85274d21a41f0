"""Small binarized models and data shared by the training tests (Bop, CaseOptimizer, flip ratio, scheduler)."""

from __future__ import annotations

import keras
import numpy as np

import ste


def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """sklearn's 8×8 digits scaled to [−1, 1], split 75/25 (stratified, fixed seed)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 8.0 - 1.0).astype("float32")
    return tuple(train_test_split(x, y, test_size=0.25, random_state=0, stratify=y))  # type: ignore[return-value]


def binarized_mlp(
    hidden: int = 256, seed: int = 0, metrics: list[str] | None = None, per_sample_norm: bool = False
) -> keras.Model:
    """Float input → binary-kernel dense → BN → binary input and kernel dense → BN → softmax.

    ``per_sample_norm``: LayerNormalization instead of BatchNormalization (whose batch statistics differ per
    replica under MirroredStrategy, so only then do replicated and single-device runs compute the same).
    """
    keras.utils.set_random_seed(seed)
    norm = keras.layers.LayerNormalization if per_sample_norm else keras.layers.BatchNormalization
    extra = {} if metrics is None else {"metrics": metrics}
    clip = {"kernel_constraint": "weight_clip"}  # a no-op on Bop's ±1 kernels; keeps the layers' warning quiet
    return keras.Sequential(
        [
            keras.Input((64,)),
            ste.layers.QuantDense(
                hidden, kernel_quantizer="ste_sign", use_bias=False, name="binary_1", **clip, **extra
            ),
            norm(name="bn_1"),
            ste.layers.QuantDense(
                10, input_quantizer="ste_sign", kernel_quantizer="ste_sign", use_bias=False, name="binary_2", **clip
            ),
            norm(name="bn_2"),
            keras.layers.Activation("softmax"),
        ]
    )


def bop_adam(gamma: object = 1e-3, threshold: float = 1e-6, lr: float = 0.01) -> ste.optimizers.CaseOptimizer:
    return ste.optimizers.CaseOptimizer(
        (ste.optimizers.Bop.is_binary_variable, ste.optimizers.Bop(threshold=threshold, gamma=gamma)),
        default_optimizer=keras.optimizers.Adam(lr),
    )


def weights(model: keras.Model) -> dict[str, np.ndarray]:
    """By layer and variable name (a model's name and a loaded model's paths vary)."""
    return {"/".join(v.path.split("/")[-2:]): v.numpy() for v in model.weights}


def optimizer_state(optimizer: keras.optimizers.Optimizer) -> list[np.ndarray]:
    return [np.asarray(v.numpy()) for v in optimizer.variables]
