"""A spiking network on scikit-learn's bundled 8×8 digits (no download), next to a float network of the same shape.

Each image is rate-coded (``ste.spiking.rate_encode``: every pixel, scaled to [0, 1], fires with that probability
at each of 20 steps) and fed to Dense(256) → LIF → Dense(10) → LIF. The spikes' backward pass is the ``atan``
surrogate from the registry (snnTorch's default); the loss is the rate-coded cross-entropy (snnTorch's
``ce_rate_loss``) and the predicted class is the output neuron that fires most. The float network is
Dense(256, relu) → Dense(10) on the pixels. At the end: both test accuracies, and a spike raster of the hidden layer
and the output neurons' membrane traces for one test digit (``spiking_raster.png``, ``spiking_membrane.png``).

Run: python examples/spiking_digits.py            (add --epochs N for a shorter run, --plots DIR for the figures)
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import ste

HIDDEN = 256
BATCH = 64
BETA = 0.9


def load(steps: int, seed: int) -> tuple[np.ndarray, ...]:
    digits = load_digits()
    x = digits.data.astype("float32") / 16.0  # pixels 0..16 -> firing probabilities in [0, 1]
    y = digits.target.astype("int32")
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    spikes_train = ste.spiking.rate_encode(x_train, steps, seed=seed).numpy()
    spikes_test = ste.spiking.rate_encode(x_test, steps, seed=seed + 1).numpy()
    return x_train, x_test, y_train, y_test, spikes_train, spikes_test


def spiking_model(steps: int) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((steps, 64)),
            keras.layers.Dense(HIDDEN, name="dense_1"),
            ste.spiking.LIF(beta=BETA, name="lif_1"),  # surrogate="atan(alpha=2.0)", reset="subtract"
            keras.layers.Dense(10, name="dense_2"),
            ste.spiking.LIF(beta=BETA, name="lif_out"),
        ],
        name="spiking_mlp",
    )


def float_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(HIDDEN, activation="relu", name="dense_1"),
            keras.layers.Dense(10, name="dense_2"),
        ],
        name="float_mlp",
    )


def _optimizer(epochs: int, samples: int) -> keras.optimizers.Optimizer:
    return keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(2e-3, epochs * -(-samples // BATCH)))


def train_spiking(model: keras.Model, x: np.ndarray, y: np.ndarray, epochs: int, verbose: int) -> None:
    model.compile(optimizer=_optimizer(epochs, len(x)), loss=ste.spiking.RateCrossEntropy())
    model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=verbose)


def spiking_accuracy(model: keras.Model, x: np.ndarray, y: np.ndarray) -> float:
    counts = ste.spiking.spike_count(model.predict(x, batch_size=256, verbose=0)).numpy()
    return float(np.mean(np.argmax(counts, axis=1) == y))


def train_float(model: keras.Model, data: tuple[np.ndarray, ...], epochs: int, verbose: int) -> float:
    x_train, x_test, y_train, y_test = data
    model.compile(
        optimizer=_optimizer(epochs, len(x_train)),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(x_train, y_train, batch_size=BATCH, epochs=epochs, verbose=verbose)
    return float(model.evaluate(x_test, y_test, verbose=0)[1])


def save_plots(model: keras.Model, sample: np.ndarray, label: int, directory: Path) -> list[Path]:
    """Hidden-layer spike raster and output membrane traces (the output LIF re-run with emit="membrane")."""
    hidden = keras.Model(model.inputs[0], model.get_layer("lif_1").output)(sample)
    currents = keras.Model(model.inputs[0], model.get_layer("dense_2").output)(sample)
    out_layer = model.get_layer("lif_out")
    membrane = ste.spiking.LIF.from_config({**out_layer.get_config(), "emit": "membrane", "name": "probe"})(currents)
    spikes = out_layer(currents)
    directory.mkdir(parents=True, exist_ok=True)
    raster = ste.spiking.plot_raster(hidden, title=f"hidden layer, test digit {label}")
    trace = ste.spiking.plot_membrane(
        membrane, threshold=out_layer.threshold, spikes=spikes, title=f"output neurons, test digit {label}"
    )
    paths = [directory / "spiking_raster.png", directory / "spiking_membrane.png"]
    for figure, path in zip((raster, trace), paths):
        figure.tight_layout()
        figure.savefig(path, dpi=110)
    return paths


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30, help="training epochs per network (default 30)")
    parser.add_argument("--steps", type=int, default=20, help="time steps of the rate code, at most 25 (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--plots", default=".", help="directory for the two figures ('' to skip; default .)")
    parser.add_argument("--verbose", type=int, default=2, help="Keras progress output: 0 silent, 1 bar, 2 per epoch")
    args = parser.parse_args(argv)
    if not 1 <= args.steps <= 25:
        parser.error("--steps must be between 1 and 25")

    start = time.perf_counter()
    keras.utils.set_random_seed(args.seed)
    x_train, x_test, y_train, y_test, spikes_train, spikes_test = load(args.steps, args.seed)
    print(f"digits: {len(x_train)} training and {len(x_test)} test images, rate-coded over {args.steps} steps\n")

    print("== spiking network (LIF neurons, atan surrogate, rate-coded cross-entropy) ==")
    spiking = spiking_model(args.steps)
    train_spiking(spiking, spikes_train, y_train, args.epochs, args.verbose)
    spiking_acc = spiking_accuracy(spiking, spikes_test, y_test)
    print("\n== float network of the same shape ==")
    keras.utils.set_random_seed(args.seed)
    float_acc = train_float(float_model(), (x_train, x_test, y_train, y_test), args.epochs, args.verbose)

    print(f"\ntest accuracy  spiking: {spiking_acc:.2%}   float: {float_acc:.2%}\n")
    if args.plots:
        paths = save_plots(spiking, spikes_test[:1], int(y_test[0]), Path(args.plots))
        print("saved " + ", ".join(str(p) for p in paths))
    seconds = time.perf_counter() - start
    print(f"total time: {seconds:.1f} s")
    return {"spiking": spiking_acc, "float": float_acc, "seconds": seconds}


if __name__ == "__main__":
    main()
