"""A graph as deep as Keras builds under Python's default recursion limit stays buildable after a transformation
that adds nodes to it (QAT's output quantizers), and the limit is the caller's again afterwards."""

from __future__ import annotations

import sys

import keras
import numpy as np

import ste

#: 640 Dense and 320 Add nodes, 960 deep: Keras maps it under the default limit; QAT's quantizers make it deeper
BLOCKS = 320


def _residual_chain(blocks: int) -> keras.Model:
    x = inputs = keras.Input((4,))
    for _ in range(blocks):
        x = keras.layers.Dense(4)(x)
        x = keras.layers.Add()([x, keras.layers.Dense(4)(x)])
    return keras.Model(inputs, x)


def test_quantize_model_builds_a_graph_keras_built_at_the_default_recursion_limit() -> None:
    model = _residual_chain(BLOCKS)  # the reference: Keras itself maps this graph
    before = sys.getrecursionlimit()
    quantized = ste.quantize_model(model)
    assert sys.getrecursionlimit() == before
    kernels = [w for w in quantized.trainable_weights if len(w.shape) == 2]
    assert len(kernels) == 2 * BLOCKS
    y = quantized(np.ones((2, 4), "float32"))
    assert y.shape == (2, 4)
    assert np.isfinite(keras.ops.convert_to_numpy(y)).all()
