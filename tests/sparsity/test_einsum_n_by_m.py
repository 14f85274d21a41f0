"""N:M sparsity of EinsumDense kernels and of MultiHeadAttention's projections, against numpy: the kernel reshaped
into the ``(K, N)`` matrix of a matrix product (its contracted axes first, flattened in the input's order, as a sparse
matmul kernel reads it) holds exactly ``m`` zeros in every ``n`` consecutive entries of each column, the ``m``
smallest in magnitude; in every float dtype, in a ``tf.function`` and under XLA, and inside KerasHub's attention."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import ste

from .test_tfmot_parity import assert_good_error, np_n_by_m

S = ste.sparsity
L = keras.layers
DTYPES = ["float16", "bfloat16", "float32", "float64"]

# equation, input shape (no batch), output_shape, the kernel's contracted letters in the input's order
EQUATIONS = [
    ("ab,bc->ac", (8,), 6, "b"),
    ("...b,bc->...c", (3, 8), 6, "b"),
    ("abc,cd->abd", (3, 8), (None, 6), "c"),
    ("abc,dc->abd", (3, 8), (None, 6), "c"),  # the kernel holds its input axis last
    ("abc,cde->abde", (3, 8), (None, 2, 4), "c"),  # MultiHeadAttention's query, key and value
    ("abcd,cde->abe", (3, 2, 8), (None, 6), "cd"),  # MultiHeadAttention's output: heads and head size contracted
]


def as_matmul(kernel: np.ndarray, kernel_letters: str, contracted: str) -> np.ndarray:
    """The kernel as the (K, N) matrix of a matrix product: contracted axes first, in the input's order."""
    front = [kernel_letters.index(letter) for letter in contracted]
    rest = [axis for axis in range(kernel.ndim) if axis not in front]
    moved = np.transpose(kernel, front + rest)
    k = int(np.prod([kernel.shape[axis] for axis in front]))
    return moved.reshape(k, -1)


def assert_m_by_n(stripped: np.ndarray, initial: np.ndarray, kernel_letters: str, contracted: str) -> None:
    """Exactly 2 zeros in every 4 consecutive entries along K, each group's 2 smallest magnitudes of ``initial``, the
    others kept as they were."""
    matrix = as_matmul(stripped.astype(np.float64), kernel_letters, contracted)
    before = as_matmul(np.abs(initial.astype(np.float64)), kernel_letters, contracted)
    groups = matrix.T.reshape(-1, 4)  # each column's K entries, 4 consecutive at a time
    magnitudes = before.T.reshape(-1, 4)
    zero = groups == 0
    np.testing.assert_array_equal(zero.sum(-1), 2)
    pruned = np.where(zero, magnitudes, -np.inf).max(-1)
    kept = np.where(zero, np.inf, magnitudes).min(-1)
    assert (pruned <= kept).all()  # the pruned ones are the smallest of their group
    values = as_matmul(initial.astype(np.float64), kernel_letters, contracted).T.reshape(-1, 4)
    np.testing.assert_array_equal(groups[~zero], values[~zero])  # the kept weights are the initial ones


def kernel_letters(equation: str) -> str:
    return equation.split("->")[0].split(",")[1]


def train(model: keras.Model, steps: int = 1, lr: float = 0.0, jit_compile: bool | str = False) -> None:
    x = np.random.default_rng(1).normal(size=(4, *model.input_shape[1:])).astype("float32")
    y = np.zeros((4, *model.output_shape[1:]), "float32")
    model.compile(keras.optimizers.SGD(lr), "mse", jit_compile=jit_compile)
    model.fit(x, y, batch_size=4, epochs=steps, verbose=0, callbacks=[S.UpdatePruningStep()])


def einsum_model(equation: str, shape: tuple[int, ...], output_shape, dtype: str = "float32") -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape)
    layer = L.EinsumDense(equation, output_shape=output_shape, name="einsum", dtype=dtype)
    return keras.Model(inputs, layer(inputs))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("equation,shape,output_shape,contracted", EQUATIONS)
def test_einsum_dense_kernel_is_2_of_4_along_its_contracted_axis(equation, shape, output_shape, contracted, dtype):
    model = einsum_model(equation, shape, output_shape, dtype)
    initial = model.get_layer("einsum").kernel.numpy().copy()
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1), sparsity_m_by_n=(2, 4))
    train(pruned)  # SGD(0): the mask is made of the initial kernel
    stripped = S.strip_pruning(pruned).get_layer("einsum").kernel.numpy()
    assert_m_by_n(stripped, initial, kernel_letters(equation), contracted)
    if dtype == "float32":  # distinct magnitudes: the mask is numpy's, along the innermost contracted axis
        axis = kernel_letters(equation).index(contracted[-1])
        np.testing.assert_array_equal(stripped, initial * np_n_by_m(initial, 2, 4, axis))


@pytest.mark.parametrize("dtype", DTYPES)
def test_multi_head_attention_projections_are_2_of_4_along_their_contracted_axes(dtype):
    keras.utils.set_random_seed(0)
    query = keras.Input((3, 16))
    value = keras.Input((5, 12))
    outputs = L.MultiHeadAttention(2, 8, name="mha", dtype=dtype)(query, value)
    model = keras.Model([query, value], outputs)
    mha = model.get_layer("mha")
    names = ("query", "key", "value", "output")
    initial = {name: getattr(mha, f"_{name}_dense").kernel.numpy().copy() for name in names}
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1), sparsity_m_by_n=(2, 4))
    rng = np.random.default_rng(0)
    pruned.compile(keras.optimizers.SGD(0.0), "mse")
    pruned.fit(
        [rng.normal(size=(2, 3, 16)).astype("float32"), rng.normal(size=(2, 5, 12)).astype("float32")],
        np.zeros((2, 3, 16), "float32"),
        verbose=0,
        callbacks=[S.UpdatePruningStep()],
    )
    stripped = S.strip_pruning(pruned).get_layer("mha")
    assert type(stripped) is L.MultiHeadAttention
    # query (16, 2, 8) and key, value (12, 2, 8) contract their first axis; output (2, 8, 16) heads and head size
    for name, letters, contracted in (
        ("query", "cde", "c"),
        ("key", "cde", "c"),
        ("value", "cde", "c"),
        ("output", "cde", "cd"),
    ):
        kernel = getattr(stripped, f"_{name}_dense").kernel.numpy()
        assert_m_by_n(kernel, initial[name], letters, contracted)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["tf.function", "XLA"])
def test_training_keeps_2_of_4_in_a_tf_function_and_under_xla(jit_compile):
    model = einsum_model("abcd,cde->abe", (3, 2, 8), (None, 6))
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=2), sparsity_m_by_n=(2, 4))
    train(pruned, steps=5, lr=0.1, jit_compile=jit_compile)
    kernel = S.strip_pruning(pruned).get_layer("einsum").kernel.numpy()
    assert kernel.std() > 0
    matrix = as_matmul(kernel, "cde", "cd")
    np.testing.assert_array_equal((matrix.T.reshape(-1, 4) == 0).sum(-1), 2)


def test_contracted_axis_not_a_multiple_of_the_group_is_refused_before_anything_changes():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3, 6))  # 6 input features: not a multiple of 4
    model = keras.Model(inputs, L.EinsumDense("abc,cde->abde", output_shape=(None, 2, 4), name="einsum")(inputs))
    before = model.get_layer("einsum").kernel.numpy().copy()
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(model, sparsity_m_by_n=(2, 4))
    assert_good_error(info, "multiple of 4", "6", "axis -3")
    np.testing.assert_array_equal(model.get_layer("einsum").kernel.numpy(), before)


def test_attention_head_size_not_a_multiple_of_the_group_is_refused():
    query = keras.Input((3, 8))
    model = keras.Model(query, L.MultiHeadAttention(4, 2, name="mha")(query, query))  # head size 2
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(model, sparsity_m_by_n=(2, 4))
    assert_good_error(info, "multiple of 4", "output")


def test_einsum_without_contracted_axis_is_refused_as_before():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    model = keras.Model(inputs, L.EinsumDense("ab,b->ab", output_shape=8, name="scale")(inputs))
    with pytest.raises(ste.errors.UnsupportedLayerError) as info:
        S.prune_low_magnitude(model, sparsity_m_by_n=(2, 4))
    assert_good_error(info, "sparsity_m_by_n", "input-channel axis")


def test_keras_hub_attention_projections_are_2_of_4():
    keras_hub = pytest.importorskip("keras_hub", reason="keras-hub is not installed (a test dependency)")
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=100, num_layers=1, num_heads=2, hidden_dim=32, intermediate_dim=64, max_sequence_length=16
    )
    pruned = S.prune_low_magnitude(
        backbone,
        S.ConstantSparsity(0.5, 0, frequency=1),
        sparsity_m_by_n=(2, 4),
        filters=[L.Dense, L.EinsumDense, L.MultiHeadAttention],
    )
    pruned.compile(keras.optimizers.SGD(0.0), "mse")
    tokens = np.random.default_rng(0).integers(0, 100, size=(2, 16)).astype("int32")
    pruned.fit(
        {"token_ids": tokens, "padding_mask": np.ones_like(tokens)},
        np.zeros((2, 16, 32), "float32"),
        verbose=0,
        callbacks=[S.UpdatePruningStep()],
    )
    stripped = S.strip_pruning(pruned)
    attention = [
        layer
        for layer in stripped._flatten_layers(include_self=False, recursive=True)
        if isinstance(layer, L.MultiHeadAttention)
    ]
    assert attention
    for layer in attention:
        for name, contracted in (("query", "c"), ("key", "c"), ("value", "c"), ("output", "cd")):
            kernel = getattr(layer, f"_{name}_dense").kernel.numpy()
            matrix = as_matmul(kernel, "cde", contracted)
            np.testing.assert_array_equal((matrix.T.reshape(-1, 4) == 0).sum(-1), 2)
