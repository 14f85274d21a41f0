"""A binary layer that keeps its input as bits: the order its graph imposes and the formulation chosen under XLA.

TensorFlow's executor runs an op as soon as its inputs exist; these tests check, on the traced graph, the orders the
layer pins so that float tensors do not outlive their use (docs/performance.md, "Memory of binarized training"):
the input is packed before the layer's output exists, and, where TensorFlow's CPU kernels are oneDNN's (or a GPU runs
the convolutions, or TensorFlow does not say), the input gradient is computed after the kernel gradient; with oneDNN
off the two run side by side (TensorFlow's own filter gradient leaves a core idle).
Under XLA the ±1 input is rebuilt with an elementwise select (XLA compiles a table gather to a slow loop on CPU).
"""

from __future__ import annotations

from typing import Any

import pytest
import tensorflow as tf

import ste
from ste.layers import _gradient_order


def _traced(jit_compile: bool) -> tuple[Any, tf.Tensor, tf.Tensor, tf.Tensor]:
    """The traced graph of a binary convolution's forward and backward pass, its output and the two gradients, traced
    with bits kept."""
    layer = ste.layers.QuantConv2D(
        4, 3, padding="same", input_quantizer="sign", kernel_quantizer="sign", kernel_constraint="weight_clip"
    )
    x = tf.random.stateless_normal([2, 8, 8, 3], seed=(1, 2))
    layer(x)

    @tf.function(jit_compile=jit_compile)
    def step(x: tf.Tensor) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
        return y, tape.gradient(y, [x, layer.kernel])

    with ste.bit_masks(True):  # a small input: the default would keep it as floats (below MIN_ELEMENTS)
        concrete = step.get_concrete_function(x)
    y, (dx, dkernel) = concrete.structured_outputs
    return concrete.graph, y, dx, dkernel


def _ancestors(op: tf.Operation, control: bool = True) -> set[tf.Operation]:
    """Every op ``op`` waits for, through data edges (and control edges unless ``control=False``)."""
    seen: set[tf.Operation] = set()
    stack = [op]
    while stack:
        current = stack.pop()
        for parent in [t.op for t in current.inputs] + (list(current.control_inputs) if control else []):
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return seen


@pytest.mark.parametrize(
    ("onednn", "gpu", "ordered"),
    [(True, False, True), (None, False, True), (False, True, True), (False, False, False)],
    ids=["onednn-on", "onednn-unknown", "onednn-off-gpu", "onednn-off-cpu"],
)
def test_the_output_waits_for_the_packing_and_the_input_gradient_for_the_kernel_gradient(
    monkeypatch: pytest.MonkeyPatch, onednn: bool | None, gpu: bool, ordered: bool
) -> None:
    monkeypatch.setattr(_gradient_order, "onednn_enabled", lambda: onednn)
    monkeypatch.setattr(_gradient_order, "has_gpu", lambda: gpu)
    _, output, dx, dkernel = _traced(jit_compile=False)
    packed = [op for op in _ancestors(output.op) if op.type == "Cast" and op.outputs[0].dtype == tf.uint8]
    assert packed, "the layer's output does not wait for its input's bits"
    # only the ops the returned gradients need run (the function prunes the rest)
    filters = [op for op in _ancestors(dkernel.op) if op.type == "Conv2DBackpropFilter"]
    inputs = [op for op in _ancestors(dx.op) if op.type == "Conv2DBackpropInput"]
    assert len(filters) == len(inputs) == 1
    waits = filters[0] in _ancestors(inputs[0])
    assert waits == ordered, f"the input gradient {'does not wait' if ordered else 'waits'} for the kernel gradient"
    assert filters[0] not in _ancestors(inputs[0], control=False)  # at most a control edge: no data flows between them


def test_xla_rebuilds_the_input_with_a_select_and_tensorflow_with_a_table() -> None:
    for jit_compile, expected in ((False, "GatherV2"), (True, "SelectV2")):
        _, _, _, dkernel = _traced(jit_compile)
        (conv,) = [op for op in _ancestors(dkernel.op) if op.type == "Conv2DBackpropFilter"]
        rebuilt = conv.inputs[0].op  # the ±1 input the kernel gradient is computed from
        while rebuilt.type in ("Identity", "IdentityN", "Reshape", "StridedSlice"):  # IdentityN: the higher-order tie
            rebuilt = rebuilt.inputs[0].op
        assert rebuilt.type == expected
