"""prune_low_magnitude, the wrapper, the callbacks and strip_pruning: masks during training against numpy at every
update step, one optimizer update with each gradient against numpy, the covered layers, model kinds, the errors
(raised before any variable changes), save/load, strip and TFLite."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .test_masks import numpy_kept, numpy_mask, numpy_n_by_m

S = ste.sparsity
L = keras.layers


def dense_model(seed: int = 0, units: int = 12, inputs: int = 8, dtype: str = "float32") -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((inputs,)), L.Dense(units, activation="relu", dtype=dtype), L.Dense(4, dtype=dtype)]
    )


def one_step(model: keras.Model, x: np.ndarray, loss_weights: np.ndarray, lr: float = 0.1) -> None:
    """One SGD step on sum(model(x)·c) in a custom loop, with the callback driven by hand as TFMOT's guide does."""
    callback = S.UpdatePruningStep()
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_train_batch_begin(0)
    optimizer = keras.optimizers.SGD(lr)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True) * loss_weights)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply(grads, model.trainable_variables)


def tflite_interpreter(flatbuffer: bytes):
    """LiteRT's interpreter (``ai-edge-litert``), else TensorFlow's."""
    try:
        from ai_edge_litert import interpreter as litert

        made = litert.Interpreter(model_content=flatbuffer)
    except ImportError:
        made = tf.lite.Interpreter(model_content=flatbuffer)
    made.allocate_tensors()
    return made


def layer_of(model: keras.Model, kind: type) -> keras.layers.Layer:
    return next(layer for layer in model._flatten_layers(include_self=False) if isinstance(layer, kind))


# -- masks during training --------------------------------------------------------------------------------------


def test_at_every_update_step_the_mask_holds_the_scheduled_fraction_by_magnitude() -> None:
    model = dense_model(units=20)
    schedule = S.PolynomialDecay(0.1, 0.85, begin_step=2, end_step=14, power=2, frequency=3)
    pruned = S.prune_low_magnitude(model, schedule)
    wrapper = pruned.layers[0]
    rng = np.random.default_rng(0)
    callback = S.UpdatePruningStep()
    callback.set_model(pruned)
    callback.on_train_begin()
    optimizer = keras.optimizers.Adam(0.05)
    previous_mask = np.ones(wrapper.layer.kernel.shape, bool)
    updates = 0
    for batch in range(18):
        x = rng.normal(size=(16, 8)).astype(np.float32)
        before = wrapper.layer.kernel.numpy().copy()
        callback.on_train_batch_begin(batch)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(pruned(x, training=True)))
        optimizer.apply(tape.gradient(loss, pruned.trainable_variables), pruned.trainable_variables)
        step = batch + 1  # the step the schedule sees: the optimizer's iteration count + 1, as TFMOT's
        assert int(wrapper.pruning_step.numpy()) == step
        mask = wrapper.pruning_vars[0][1].numpy().astype(bool)
        should, sparsity = schedule(tf.constant(step))
        if bool(should):
            updates += 1
            # re-zeroed with the previous mask first (Adam moves pruned latent weights; they stay pruned)
            np.testing.assert_array_equal(mask, numpy_mask(before * previous_mask, float(sparsity)))
            assert (~mask).sum() == before.size - numpy_kept(before.size, float(sparsity))
        else:
            np.testing.assert_array_equal(mask, previous_mask)
        previous_mask = mask
    assert updates == 5  # steps 2, 5, 8, 11, 14
    callback.on_epoch_end(0)  # Adam's momentum moves zeroed weights between steps; the epoch's end re-zeroes them
    assert (wrapper.layer.kernel.numpy()[~previous_mask] == 0).all()
    assert np.isclose((~previous_mask).mean(), 0.85, atol=1 / previous_mask.size)


def test_fit_without_update_pruning_step_names_the_callback_before_any_variable_changes() -> None:
    pruned = S.prune_low_magnitude(dense_model(), S.ConstantSparsity(0.5, 0, frequency=1))
    pruned.compile("sgd", "mse")
    before = [v.numpy().copy() for v in pruned.variables]
    x, y = np.ones((8, 8), np.float32), np.ones((8, 4), np.float32)
    with pytest.raises(S.MissingCallbackError, match="UpdatePruningStep") as error:
        pruned.fit(x, y, verbose=0)
    assert isinstance(error.value, ste.STEError)
    for a, b in zip(before, pruned.variables):
        np.testing.assert_array_equal(a, b.numpy())
    pruned.fit(x, y, verbose=0, callbacks=[S.UpdatePruningStep()])  # and it trains with the callback
    assert int(pruned.layers[0].pruning_step.numpy()) == 1


def test_fit_prunes_with_tfmots_step_count_and_under_xla() -> None:
    for jit in (False, True):
        pruned = S.prune_low_magnitude(dense_model(), S.ConstantSparsity(0.75, 0, frequency=4))
        pruned.compile(keras.optimizers.SGD(0.01), "mse", jit_compile=jit)
        x = np.random.default_rng(1).normal(size=(48, 8)).astype(np.float32)
        y = np.random.default_rng(2).normal(size=(48, 4)).astype(np.float32)
        pruned.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[S.UpdatePruningStep()])
        wrapper = pruned.layers[0]
        assert np.all(wrapper.pruning_vars[0][1].numpy() == 1)  # steps 1..3: no update yet (frequency 4)
        pruned.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[S.UpdatePruningStep()])
        assert int(wrapper.pruning_step.numpy()) == 6
        for layer in pruned.layers:
            mask = layer.pruning_vars[0][1].numpy()
            assert (mask == 0).sum() == mask.size - numpy_kept(mask.size, 0.75)  # step 4 updated every mask


def test_fit_reads_the_step_from_the_optimizer_so_a_shared_layer_counts_each_batch_once() -> None:
    """A pruned layer called twice per batch (shared) sees the optimizer's iteration count + 1 in both calls, so the
    schedule advances one step a batch; batch by batch, from the optimizer's variable (not a count of calls)."""
    keras.utils.set_random_seed(3)
    shared = S.prune_low_magnitude(L.Dense(8), S.PolynomialDecay(0.0, 0.75, 0, 4, power=1, frequency=1))
    inputs = keras.Input((8,))
    model = keras.Model(inputs, shared(shared(inputs)))
    model.compile(keras.optimizers.SGD(0.0), "mse")
    seen: list[tuple[int, int]] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append((int(shared.pruning_step.numpy()), int(model.optimizer.iterations.numpy())))

    x = np.random.default_rng(4).normal(size=(5, 8)).astype(np.float32)
    model.fit(x, x, batch_size=1, verbose=0, callbacks=[S.UpdatePruningStep(), Record()])
    assert seen == [(step, step) for step in range(1, 6)]  # after batch k (1-based) the optimizer has made k updates
    mask = shared.pruning_vars[0][1].numpy()
    assert (mask == 0).sum() == mask.size - numpy_kept(mask.size, 0.75)  # the schedule reached its end at step 4


def tfmot_update_steps(steps: int, begin: int, end: int, frequency: int) -> np.ndarray:
    """The steps among a fit's first ``steps`` batches at which TFMOT updates the masks: its
    ``PruningSchedule._should_prune_in_step`` in numpy, at the step its wrapper sees (the iteration count + 1)."""
    step = np.arange(1, steps + 1)
    in_range = (step >= begin) & ((end == -1) | (step <= end))
    return step[in_range & ((step - begin) % frequency == 0)]


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("pattern", [None, (2, 4)], ids=["magnitude", "2:4"])
def test_fit_computes_the_masks_only_at_the_steps_tfmots_schedule_updates(pattern, jit: bool, monkeypatch) -> None:
    """Each mask computation (by magnitude or N:M) is counted inside the train step, at the step it runs for: the
    masks are computed once per wrapper at each step where TFMOT's schedule says to update, and at no other step."""
    begin, end, frequency, steps = 3, 17, 4, 22
    schedule = S.ConstantSparsity(0.5, begin, end, frequency=frequency)
    pruned = S.prune_low_magnitude(dense_model(), schedule, sparsity_m_by_n=pattern)
    pruned.compile(keras.optimizers.SGD(0.01), "mse", jit_compile=jit)
    x = np.random.default_rng(5).normal(size=(steps, 8)).astype(np.float32)
    y = np.random.default_rng(6).normal(size=(steps, 4)).astype(np.float32)
    pruned.build((None, 8))
    wrappers = S._callbacks.pruned_layers(pruned)
    counts = tf.Variable(tf.zeros([steps + 1], tf.int64), trainable=False)  # counts[step]: mask computations
    name = "n_by_m_keep" if pattern else "magnitude_keep"
    original = getattr(S._wrapper, name)

    def counted(weight, *args, **kwargs):
        counts.scatter_nd_add(tf.reshape(wrappers[0].pruning_step.value, [1, 1]), tf.ones([1], tf.int64))
        return original(weight, *args, **kwargs)

    monkeypatch.setattr(S._wrapper, name, counted)
    pruned.fit(x, y, batch_size=1, epochs=1, verbose=0, shuffle=False, callbacks=[S.UpdatePruningStep()])
    assert int(wrappers[0].pruning_step.numpy()) == steps
    expected = np.zeros(steps + 1, np.int64)
    expected[tfmot_update_steps(steps, begin, end, frequency)] = len(wrappers)  # steps 3, 7, 11, 15
    np.testing.assert_array_equal(counts.numpy(), expected)


# -- gradients ----------------------------------------------------------------------------------------------------


def numpy_dense_step(w, b, m, x, c, lr, gradient, decay):
    """One SGD step of sum(relu(x @ (w·m) + b)·c) for a single Dense layer with a ReLU, in float64 numpy."""
    pre = x @ (w * m) + b
    dpre = c * (pre > 0)
    dw_masked = x.T @ dpre  # the gradient with respect to the masked kernel
    if gradient == "masked":
        dw = dw_masked * m
        return (w * m) - lr * dw, b - lr * dpre.sum(0)  # TFMOT zeroes the pruned weights at the update
    dw = dw_masked + decay * (1 - m) * w
    return w - lr * dw, b - lr * dpre.sum(0)


@pytest.mark.parametrize("gradient, decay", [("masked", None), ("sr_ste", 2e-4), ("sr_ste", 0.5)])
def test_one_optimizer_update_matches_numpy(gradient: str, decay) -> None:
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((6,)), L.Dense(10, activation="relu", bias_initializer="random_normal")])
    w0, b0 = (v.numpy().astype(np.float64) for v in model.layers[0].weights)
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.6, 0, frequency=1), gradient=gradient, decay=decay)
    rng = np.random.default_rng(4)
    x, c = rng.normal(size=(5, 6)), rng.normal(size=(5, 10))
    one_step(pruned, x.astype(np.float32), c.astype(np.float32), lr=0.1)
    m = numpy_mask(w0, 0.6).astype(np.float64)
    w1, b1 = numpy_dense_step(w0, b0, m, x, c, 0.1, gradient, 2e-4 if decay is None else decay)
    layer = pruned.layers[0].layer
    np.testing.assert_allclose(layer.kernel.numpy(), w1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.bias.numpy(), b1, rtol=1e-5, atol=1e-6)
    if gradient == "sr_ste":
        assert (layer.kernel.numpy()[m == 0] != 0).all()  # latent weights kept and updated


def test_second_order_gradients_through_the_masked_op_are_exact() -> None:
    w = tf.Variable(np.random.default_rng(5).normal(size=(4, 3)).astype(np.float32))
    m = tf.constant(numpy_mask(w.numpy(), 0.5).astype(np.float32))
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = tf.reduce_sum(S.apply_mask(w, m) ** 3)
        g = inner.gradient(y, w)
        s = tf.reduce_sum(g)
    np.testing.assert_allclose(g.numpy(), 3 * (w.numpy() * m.numpy()) ** 2 * m.numpy(), rtol=1e-6)
    # d/dw of sum(3·(w·m)²·m) = 6·w·m³: autodiff of the smooth primitive sum((w·m)³)
    np.testing.assert_allclose(outer.gradient(s, w).numpy(), 6 * w.numpy() * m.numpy() ** 3, rtol=1e-6)


def test_sr_ste_reaches_a_lower_loss_than_the_masked_gradient_on_the_same_budget() -> None:
    rng = np.random.default_rng(6)
    teacher = rng.normal(size=(16, 8))
    teacher_mask = numpy_n_by_m(teacher, 2, 4, 0)
    x = rng.normal(size=(256, 16)).astype(np.float32)
    y = (x @ (teacher * teacher_mask)).astype(np.float32)  # a 2:4 target the student can match exactly
    losses = {}
    for gradient in ("masked", "sr_ste"):
        keras.utils.set_random_seed(7)
        student = keras.Sequential([keras.Input((16,)), L.Dense(8, use_bias=False)])
        pruned = S.prune_low_magnitude(
            student, S.ConstantSparsity(0.5, 0, frequency=1), sparsity_m_by_n=(2, 4), gradient=gradient
        )
        pruned.compile(keras.optimizers.SGD(0.05), "mse")
        pruned.fit(x, y, batch_size=32, epochs=15, verbose=0, shuffle=False, callbacks=[S.UpdatePruningStep()])
        losses[gradient] = float(pruned.evaluate(x, y, verbose=0))
    assert losses["sr_ste"] < 0.5 * losses["masked"], losses


# -- layers and models --------------------------------------------------------------------------------------------


def _layer_cases() -> list[tuple[str, object, tuple[int, ...], str, tuple[str, ...]]]:
    """Each layer kind of the docs' table: its class name, how to make it, its input, and the weights it prunes."""
    cases = [
        ("Dense", lambda: L.Dense(8), (12,), "float32", ("kernel",)),
        ("Conv1D", lambda: L.Conv1D(8, 3), (10, 4), "float32", ("kernel",)),
        ("Conv2D", lambda: L.Conv2D(8, 3), (6, 6, 4), "float32", ("kernel",)),
        ("Conv3D", lambda: L.Conv3D(4, 2), (4, 4, 4, 4), "float32", ("kernel",)),
        ("DepthwiseConv1D", lambda: L.DepthwiseConv1D(3, depth_multiplier=2), (10, 4), "float32", ("kernel",)),
        ("DepthwiseConv2D", lambda: L.DepthwiseConv2D(3, depth_multiplier=2), (6, 6, 4), "float32", ("kernel",)),
        ("SeparableConv1D", lambda: L.SeparableConv1D(8, 3), (10, 4), "float32", _SEPARABLE),
        ("SeparableConv2D", lambda: L.SeparableConv2D(8, 3), (6, 6, 4), "float32", _SEPARABLE),
        ("Conv2DTranspose", lambda: L.Conv2DTranspose(4, 3), (5, 5, 8), "float32", ("kernel",)),
        ("Embedding", lambda: L.Embedding(20, 8), (5,), "int32", ("embeddings",)),
        ("EinsumDense", lambda: L.EinsumDense("ab,bc->ac", output_shape=8), (12,), "float32", ("kernel",)),
    ]
    if hasattr(L, "ReversibleEmbedding"):  # Keras 3.13+ (KerasHub's is the same class under another name)
        cases += [
            ("ReversibleEmbedding", lambda: L.ReversibleEmbedding(20, 8), (5,), "int32", ("embeddings",)),
            (
                "ReversibleEmbedding",
                lambda: L.ReversibleEmbedding(20, 8, tie_weights=False),
                (5,),
                "int32",
                ("embeddings", "reverse_embeddings"),
            ),
        ]
    return cases


_SEPARABLE = ("depthwise_kernel", "pointwise_kernel")


@pytest.mark.filterwarnings("ignore:Gradients do not exist")  # an untied reverse table is not read by a lookup
@pytest.mark.parametrize(
    "name, make, shape, dtype, names", _layer_cases(), ids=[f"{c[0]}-{len(c[4])}" for c in _layer_cases()]
)
def test_every_covered_layer_is_pruned_trained_and_stripped(name: str, make, shape, dtype: str, names) -> None:
    keras.utils.set_random_seed(8)
    inputs = keras.Input(shape, dtype=dtype)
    outputs = L.Flatten()(make()(inputs))
    model = keras.Model(inputs, L.Dense(2)(outputs))
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.7, 0, frequency=1))
    rng = np.random.default_rng(9)
    x = rng.integers(0, 20, size=(4, *shape)) if dtype == "int32" else rng.normal(size=(4, *shape))
    x = x.astype(dtype)
    np.testing.assert_allclose(pruned.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    pruned.compile("sgd", "mse")
    pruned.fit(x, np.zeros((4, 2), np.float32), verbose=0, callbacks=[S.UpdatePruningStep()])
    wrapper = pruned.layers[1]
    assert type(wrapper.layer).__name__ == name
    assert tuple(weight.path.split("/")[-1] for weight, _, _ in wrapper.pruning_vars) == names
    stripped = S.strip_pruning(pruned)
    assert not any(isinstance(layer, S.PruneLowMagnitude) for layer in stripped.layers)
    plain = stripped.get_layer(wrapper.layer.name)
    for weight_name in names:  # numpy's count of the stripped weight's zeros: the schedule's 70 %
        value = getattr(plain, weight_name).numpy()
        assert (value == 0).sum() == value.size - numpy_kept(value.size, 0.7), weight_name
    np.testing.assert_allclose(stripped.predict(x, verbose=0), pruned.predict(x, verbose=0), rtol=1e-5, atol=1e-5)


def test_functional_nested_and_shared_layers() -> None:
    keras.utils.set_random_seed(10)
    inner = keras.Sequential(
        [keras.Input((8,)), L.Dense(8, activation="tanh", name="inner_dense"), L.Dropout(0.1)], name="inner"
    )
    shared = L.Dense(8, name="shared")
    a, b = keras.Input((8,)), keras.Input((8,))
    x = L.Concatenate()([shared(inner(a)), shared(b)])
    model = keras.Model([a, b], L.Dense(3, name="head")(x))
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1))
    wrappers = S._callbacks.pruned_layers(pruned)
    assert sorted(w.layer.name for w in wrappers) == ["head", "inner_dense", "shared"]
    shared_wrapper = next(w for w in wrappers if w.layer.name == "shared")
    assert sum(layer is shared_wrapper for layer in pruned.layers) == 1 and len(shared_wrapper._inbound_nodes) == 2
    xs = [np.random.default_rng(11).normal(size=(6, 8)).astype(np.float32) for _ in range(2)]
    np.testing.assert_allclose(pruned.predict(xs, verbose=0), model.predict(xs, verbose=0), rtol=1e-5, atol=1e-6)
    original = [v.numpy().copy() for v in model.weights]
    pruned.compile("adam", "mse")
    pruned.fit(xs, np.ones((6, 3), np.float32), verbose=0, callbacks=[S.UpdatePruningStep()])
    for w in wrappers:
        assert (w.pruning_vars[0][1].numpy() == 0).mean() == 0.5
    for a_value, variable in zip(original, model.weights):  # the original model is left as it was
        np.testing.assert_array_equal(a_value, variable.numpy())
    stripped = S.strip_pruning(pruned)
    np.testing.assert_allclose(stripped.predict(xs, verbose=0), pruned.predict(xs, verbose=0), rtol=1e-5, atol=1e-6)


class Scale(L.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], input_shape[-1]), initializer="glorot_uniform")

    def call(self, x):
        return x @ self.w


class PrunableScale(Scale, S.PrunableLayer):
    def get_prunable_weights(self):
        return [self.w]


def test_an_uncovered_layer_stays_dense_with_one_warning_and_strict_refuses_it() -> None:
    keras.utils.set_random_seed(12)
    model = keras.Sequential([keras.Input((4,)), Scale(name="scale"), L.Dense(4), L.BatchNormalization()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pruned = S.prune_low_magnitude(model)
    messages = [str(w.message) for w in caught if "stay dense" in str(w.message)]
    assert len(messages) == 1 and "scale (Scale)" in messages[0] and "BatchNormalization" not in messages[0]
    assert [type(layer).__name__ for layer in pruned.layers] == ["Scale", "PruneLowMagnitude", "BatchNormalization"]
    with pytest.raises(ste.errors.UnsupportedLayerError, match=r"scale \(Scale\).*get_prunable_weights"):
        S.prune_low_magnitude(model, strict=True)
    custom = keras.Sequential([keras.Input((4,)), PrunableScale(name="p")])
    pruned = S.prune_low_magnitude(custom, S.ConstantSparsity(0.25, 0, frequency=1), strict=True)
    one_step(pruned, np.ones((2, 4), np.float32), np.ones((2, 4), np.float32))
    assert (pruned.layers[0].pruning_vars[0][1].numpy() == 0).sum() == 4


# -- N:M -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", [(2, 4), (1, 4), (6, 8)])
def test_n_by_m_masks_in_dense_and_conv_layers_group_by_group(pattern) -> None:
    keras.utils.set_random_seed(13)
    inputs = keras.Input((5, 5, 8))
    x = L.Conv2D(16, 3, name="conv")(inputs)
    outputs = L.Dense(4, name="dense")(L.Flatten()(x))
    model = keras.Model(inputs, outputs)
    pruned = S.prune_low_magnitude(
        model, sparsity_m_by_n=pattern, pruning_schedule=S.ConstantSparsity(0.5, 0, frequency=1)
    )
    before = {w.layer.name: w.layer.kernel.numpy().copy() for w in S._callbacks.pruned_layers(pruned)}
    one_step(pruned, np.ones((2, 5, 5, 8), np.float32), np.ones((2, 4), np.float32))
    zeros, group = pattern
    for wrapper in S._callbacks.pruned_layers(pruned):
        mask = wrapper.pruning_vars[0][1].numpy()
        np.testing.assert_array_equal(mask.astype(bool), numpy_n_by_m(before[wrapper.layer.name], zeros, group, -2))
        groups = np.moveaxis(mask, -2, -1).reshape(-1, group)
        assert (groups.sum(axis=1) == group - zeros).all()
    stripped = S.strip_pruning(pruned)
    kernel = stripped.get_layer("conv").kernel.numpy()
    assert ((np.moveaxis(kernel, -2, -1).reshape(-1, group) == 0).sum(axis=1) >= zeros).all()


def test_n_by_m_survives_tflite_conversion() -> None:
    keras.utils.set_random_seed(14)
    model = keras.Sequential([keras.Input((64,)), L.Dense(32, name="fc")])
    pruned = S.prune_low_magnitude(
        model, sparsity_m_by_n=(2, 4), pruning_schedule=S.ConstantSparsity(0.5, 0, frequency=1)
    )
    one_step(pruned, np.ones((2, 64), np.float32), np.ones((2, 32), np.float32))
    stripped = S.strip_pruning(pruned)
    flatbuffer = ste.to_tflite(stripped)
    interpreter = tflite_interpreter(flatbuffer)
    weights = [
        interpreter.get_tensor(d["index"]) for d in interpreter.get_tensor_details() if tuple(d["shape"]) == (32, 64)
    ]
    assert weights, "the fully connected kernel (out, in) is in the flatbuffer"
    groups = weights[0].reshape(32, 16, 4)  # TFLite's (out, in) layout: groups of 4 consecutive input channels
    assert ((groups == 0).sum(axis=-1) >= 2).all()
    x = np.random.default_rng(15).normal(size=(3, 64)).astype(np.float32)
    interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], (3, 64))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    np.testing.assert_allclose(got, stripped.predict(x, verbose=0), rtol=0.05, atol=0.05)  # int8 weights


# -- errors ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(sparsity_m_by_n=(4, 2)), ste.errors.ParameterError, "1 <= m < n"),
        (dict(sparsity_m_by_n=(4, 4)), ste.errors.ParameterError, "1 <= m < n"),
        (dict(sparsity_m_by_n=(2, 8)), ste.errors.ParameterError, "not a multiple of 8"),
        (dict(sparsity_m_by_n=(2, 4.0)), ste.errors.ParameterError, "2 integers"),
        (dict(block_size=(2, 2)), ste.errors.ParameterError, "rank-2"),
        (dict(block_pooling_type="MEAN"), ste.errors.ParameterError, "'AVG' or 'MAX'"),
        (dict(gradient="straight"), ste.errors.ParameterError, "'masked'"),
        (dict(decay=0.1), ste.errors.ParameterError, "gradient='sr_ste'"),
        (dict(gradient="sr_ste", decay=-1.0), ste.errors.ParameterError, ">= 0"),
        (dict(pruning_schedule=0.5), ste.errors.ParameterError, "PruningSchedule"),
        (dict(strict="yes"), ste.errors.ParameterError, "True or False"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_built(kwargs, error, words: str) -> None:
    keras.utils.set_random_seed(16)
    model = keras.Sequential([keras.Input((6, 6, 4)), L.Conv2D(4, 3), L.Flatten(), L.Dense(4)])
    before = [v.numpy().copy() for v in model.variables]
    with pytest.raises(error) as raised:
        S.prune_low_magnitude(model, **kwargs)
    assert words in str(raised.value)
    for a, b in zip(before, model.variables):
        np.testing.assert_array_equal(a, b.numpy())


def test_pruning_twice_and_a_layer_without_kernel_are_refused() -> None:
    pruned = S.prune_low_magnitude(dense_model())
    with pytest.raises(ste.errors.ParameterError, match="already pruned"):
        S.prune_low_magnitude(pruned)
    with pytest.raises(ste.errors.ParameterError, match="already pruned"):
        S.prune_low_magnitude(pruned.layers[0])
    with pytest.raises(ste.errors.UnsupportedLayerError, match="no kernel"):
        S.prune_low_magnitude(L.Dropout(0.5))
    with pytest.raises(ste.errors.UnsupportedLayerError, match="input-channel axis"):
        S.prune_low_magnitude(L.DepthwiseConv2D(3), sparsity_m_by_n=(2, 4))


# -- dtypes, saving, stripping, deployment -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_every_dtype_gives_the_same_kind_of_answer(dtype: str) -> None:
    model = dense_model(dtype=dtype)
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1), gradient="sr_ste")
    x = np.random.default_rng(17).normal(size=(4, 8)).astype(dtype if dtype != "bfloat16" else "float32")
    kernel = pruned.layers[0].layer.kernel.numpy().astype(np.float64)
    one_step(pruned, x, np.ones((4, 4), np.float32))
    wrapper = pruned.layers[0]
    mask = wrapper.pruning_vars[0][1]
    assert mask.dtype == "bool" and wrapper.layer.kernel.dtype == wrapper.pruning_vars[0][2].dtype == dtype
    np.testing.assert_array_equal(mask.numpy().astype(bool), numpy_mask(kernel, 0.5))
    assert pruned(x).dtype == dtype


def test_save_load_continue_and_strip(tmp_path) -> None:
    pruned = S.prune_low_magnitude(dense_model(), S.PolynomialDecay(0.2, 0.8, 0, 4, frequency=1), gradient="sr_ste")
    pruned.compile("adam", "mse")
    x = np.random.default_rng(18).normal(size=(32, 8)).astype(np.float32)
    y = np.random.default_rng(19).normal(size=(32, 4)).astype(np.float32)
    pruned.fit(x, y, batch_size=16, verbose=0, callbacks=[S.UpdatePruningStep()])
    path = str(tmp_path / "pruned.keras")
    pruned.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.layers[0], S.PruneLowMagnitude)
    assert loaded.layers[0].pruning_schedule == pruned.layers[0].pruning_schedule
    assert loaded.layers[0].gradient == "sr_ste" and loaded.layers[0].decay == pytest.approx(2e-4)
    for a, b in zip(pruned.variables, loaded.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), pruned.predict(x, verbose=0))
    for model in (pruned, loaded):  # both continue identically
        model.fit(x, y, batch_size=16, verbose=0, shuffle=False, callbacks=[S.UpdatePruningStep()])
    np.testing.assert_allclose(loaded.predict(x, verbose=0), pruned.predict(x, verbose=0), rtol=1e-6, atol=1e-6)
    mask = loaded.layers[0].pruning_vars[0][1].numpy()
    assert (mask == 0).sum() == mask.size - numpy_kept(mask.size, 0.8)  # step 4 reached the final sparsity
    with S.prune_scope():
        keras.models.load_model(path)
    stripped = S.strip_pruning(loaded)
    assert [type(layer) for layer in stripped.layers] == [L.Dense, L.Dense]
    assert (stripped.layers[0].kernel.numpy() == 0).sum() == mask.size - numpy_kept(mask.size, 0.8)
    np.testing.assert_allclose(stripped.predict(x, verbose=0), loaded.predict(x, verbose=0), rtol=1e-6, atol=1e-6)
    stripped.save(str(tmp_path / "plain.keras"))
    assert "PruneLowMagnitude" not in str(keras.models.load_model(str(tmp_path / "plain.keras")).get_config())
    single = S.strip_pruning(loaded.layers[0])
    assert type(single) is L.Dense and (single.kernel.numpy() == 0).sum() == (mask == 0).sum()


def test_masks_are_one_byte_a_weight_and_float_masks_saved_earlier_load_as_nonzero() -> None:
    """A mask is a bool variable; a store holding the masks as float 0/1 (as TFMOT and earlier versions save them)
    loads into the same masks, by the numpy mask of the kernel the update saw."""
    pruned = S.prune_low_magnitude(dense_model(), S.ConstantSparsity(0.5, 0, frequency=1))
    kernel = pruned.layers[0].layer.kernel.numpy().copy()
    one_step(pruned, np.ones((2, 8), np.float32), np.ones((2, 4), np.float32), lr=0.0)
    wrapper = pruned.layers[0]
    assert wrapper.pruning_vars[0][1].dtype == "bool"
    store: dict = {}
    wrapper.save_own_variables(store)
    assert sum(np.asarray(v).dtype == bool for v in store.values()) == 1  # the kernel's mask
    as_float = {k: np.asarray(v).astype(np.float32) if np.asarray(v).dtype == bool else v for k, v in store.items()}
    fresh = S.prune_low_magnitude(dense_model(seed=1), S.ConstantSparsity(0.5, 0, frequency=1))
    fresh.build((None, 8))
    fresh.layers[0].load_own_variables(as_float)
    np.testing.assert_array_equal(fresh.layers[0].pruning_vars[0][1].numpy(), numpy_mask(kernel, 0.5))


def test_pruning_summaries_log_each_mask_sparsity(tmp_path) -> None:
    pruned = S.prune_low_magnitude(dense_model(), S.ConstantSparsity(0.5, 0, frequency=1))
    pruned.compile("sgd", "mse")
    x = np.ones((8, 8), np.float32)
    pruned.fit(x, np.ones((8, 4), np.float32), verbose=0,
               callbacks=[S.UpdatePruningStep(), S.PruningSummaries(str(tmp_path))])  # fmt: skip
    tags = {}
    for path in (tmp_path / "train").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag.endswith(("/sparsity", "/threshold")):
                    tags[value.tag] = float(tf.make_ndarray(value.tensor))
    sparsities = [v for k, v in tags.items() if k.endswith("/sparsity")]
    assert len(sparsities) == 2 and all(abs(v - 0.5) < 1e-6 for v in sparsities), tags


def test_multi_head_attention_projections_are_pruned_saved_and_stripped(tmp_path) -> None:
    keras.utils.set_random_seed(20)
    q, v = keras.Input((5, 8)), keras.Input((6, 8))
    model = keras.Model([q, v], L.MultiHeadAttention(2, 4, name="mha")(q, v))
    rng = np.random.default_rng(21)
    x = [rng.normal(size=(3, 5, 8)).astype(np.float32), rng.normal(size=(3, 6, 8)).astype(np.float32)]
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1))
    np.testing.assert_allclose(pruned.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    pruned.compile("sgd", "mse")
    pruned.fit(x, np.zeros((3, 5, 8), np.float32), verbose=0, callbacks=[S.UpdatePruningStep()])
    (wrapper,) = S._callbacks.pruned_layers(pruned)
    assert len(wrapper.pruning_vars) == 4  # query, key, value and output projections
    for weight, mask, _ in wrapper.pruning_vars:
        assert (mask.numpy() == 0).mean() == 0.5 and (weight.numpy()[mask.numpy() == 0] == 0).all()
    pruned.save(str(tmp_path / "mha.keras"))
    loaded = keras.models.load_model(str(tmp_path / "mha.keras"))
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), pruned.predict(x, verbose=0))
    stripped = S.strip_pruning(loaded)
    assert type(stripped.get_layer("mha")) is L.MultiHeadAttention
    np.testing.assert_allclose(stripped.predict(x, verbose=0), pruned.predict(x, verbose=0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["QuantDense", "QuantConv2D"])
def test_ste_quantized_layers_read_the_masked_kernel(kind: str) -> None:
    keras.utils.set_random_seed(22)
    quantizer = ste.quantizers.DoReFa(bits=4, mode="weights")
    if kind == "QuantDense":
        layer, shape = ste.layers.QuantDense(6, kernel_quantizer=quantizer), (8,)
    else:
        layer, shape = ste.layers.QuantConv2D(4, 3, kernel_quantizer=quantizer), (5, 5, 3)
    model = keras.Sequential([keras.Input(shape), layer, L.Flatten(), L.Dense(2)])
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1))
    x = np.random.default_rng(23).normal(size=(4, *shape)).astype(np.float32)
    one_step(pruned, x, np.ones((4, 2), np.float32))
    wrapper = pruned.layers[0]
    assert type(wrapper.layer).__name__ == kind and (wrapper.pruning_vars[0][1].numpy() == 0).mean() == 0.5
    stripped = S.strip_pruning(pruned)
    np.testing.assert_allclose(stripped.predict(x, verbose=0), pruned.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    masked = wrapper.layer.kernel.numpy() * wrapper.pruning_vars[0][1].numpy()
    np.testing.assert_array_equal(stripped.layers[0].kernel.numpy(), masked)


def test_second_order_gradients_through_sr_ste_are_the_derivative_of_its_rule() -> None:
    w = tf.Variable(np.random.default_rng(24).normal(size=(4, 3)))
    m = tf.constant(numpy_mask(w.numpy(), 0.5).astype(np.float64))
    c = tf.constant(np.random.default_rng(25).normal(size=(4, 3)))
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = tf.reduce_sum(S.sr_ste(w, m, decay=0.3) * c)
        g = inner.gradient(y, w)  # c + 0.3·(1 − m)·w
        s = tf.reduce_sum(g)
    np.testing.assert_allclose(g.numpy(), c.numpy() + 0.3 * (1 - m.numpy()) * w.numpy(), rtol=1e-12)
    np.testing.assert_allclose(outer.gradient(s, w).numpy(), 0.3 * (1 - m.numpy()), rtol=1e-12)
