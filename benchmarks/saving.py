"""The cost of ste's save-time check: ``model.save`` with it, against Keras's own ``save_model`` without it.

``import ste`` makes Keras serialize a model's config once before it opens the ``.keras`` file (so that an op that
cannot be saved fails before the file is touched). Both variants save the same model to the same kind of path,
alternating, and the ratio is the median of the per-round ratios.

Run: ``python -m benchmarks.saving`` (about 10 s).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf
from keras.src.saving import saving_lib

import ste

from ._timing import alternate, load_average, summarize

__all__ = ["run"]


def _model() -> keras.Model:
    op = ste.forward(tf.nn.relu).backward("sigmoid_surrogate(beta=2.0)")
    inputs = keras.Input((8, 8, 3))
    h = ste.layers.QuantConv2D(16, 3, kernel_quantizer="lsq(bits=3)", activation=op)(inputs)
    h = keras.layers.Flatten()(h)
    for _ in range(6):
        h = ste.layers.QuantDense(
            64, input_quantizer="ste_sign", kernel_quantizer="ste_sign", kernel_constraint="weight_clip", activation=op
        )(h)
    return keras.Model(inputs, keras.layers.Dense(10)(h))


def run(rounds: int = 10) -> dict[str, Any]:
    model = _model()
    checked = saving_lib.save_model
    unchecked = getattr(checked, "__wrapped__", checked)  # Keras's function, without ste's check
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "model.keras")
        samples = alternate(
            {"keras_save": lambda: unchecked(model, path), "ste_checked_save": lambda: checked(model, path)},
            rounds=rounds,
            inner=1,
        )
    return {"load_average": load_average(), "results": summarize(samples, "keras_save")}


if __name__ == "__main__":
    results = run()
    for name, row in results["results"].items():
        print(f"{name}: median {row['median_s'] * 1e3:.1f} ms, ratio {row['ratio']:.3f}")
    print(json.dumps({"load_average": results["load_average"]}))
