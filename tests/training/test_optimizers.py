"""Bop and CaseOptimizer (larq's lq.optimizers on Keras 3).

Bop's update is checked against a numpy transcription of larq 0.14's ``Bop._resource_apply_dense``
(REFERENCE.md §6): ``m ← m + γ·(g − m)``, ``w ← sign(sign(−sign(w·m − τ)·w) + 0.1)`` (larq's ``math.sign``).
"""

from __future__ import annotations

import contextlib
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.optimizers import Bop, CaseOptimizer

from . import _models

FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


def bop_reference(w, m, g, gamma, threshold, wide):
    """One larq Bop step in the dtype ``wide`` the update is computed in (float32, or float64 for float64)."""
    m_t = m.astype(wide) + wide(gamma) * (g.astype(wide) - m.astype(wide))
    flipped = -np.sign(w.astype(wide) * m_t - wide(threshold)) * w.astype(wide)
    return np.sign(np.sign(flipped) + 0.1), m_t


@pytest.mark.parametrize("dtype", FLOATS)
def test_bop_matches_a_numpy_transcription_of_larq(dtype):
    rng = np.random.default_rng(0)
    np_dtype = dtype.as_numpy_dtype
    wide = np.float64 if dtype == tf.float64 else np.float32
    gamma, threshold = 0.25, 1e-3
    w = rng.normal(size=(6, 5)).astype(np_dtype)  # a latent (non-binary) start: the first step binarizes it
    variable = keras.Variable(w, dtype=dtype.name)
    bop = Bop(threshold=threshold, gamma=gamma)
    m = np.zeros(w.shape, np_dtype)
    flips = 0
    for step in range(6):
        g = (rng.normal(size=w.shape) * 0.05 * (step + 1)).astype(np_dtype)
        bop.apply([tf.constant(g)], [variable])
        w_new, m_t = bop_reference(w, m, g, gamma, threshold, wide)
        flips += int(np.sum((w_new != np.sign(np.sign(w.astype(wide)) + 0.1)) & (step > 0)))
        w, m = w_new.astype(np_dtype), m_t.astype(np_dtype)
        np.testing.assert_array_equal(variable.numpy().astype(np.float64), w.astype(np.float64), err_msg=f"step {step}")
        np.testing.assert_array_equal(bop.variables[-1].numpy().astype(np.float64), m.astype(np.float64))
    assert flips > 0  # the test exercised flips, not only the initial binarization
    assert variable.dtype == dtype.name


def test_bop_flips_exactly_when_momentum_exceeds_threshold_with_the_weight_sign():
    w = np.array([1.0, 1.0, -1.0, -1.0, 1.0, -1.0], np.float32)
    g = np.array([0.5, 0.5e-3, -0.5, 0.5, -0.5, -0.5e-3], np.float32)  # m = γ·g with γ = 1 at the first step
    variable = keras.Variable(w)
    Bop(threshold=1e-2, gamma=1.0).apply([tf.constant(g)], [variable])
    # flip: w·m > τ (|m| > τ and same sign); keep: |m| <= τ, or opposite signs
    np.testing.assert_array_equal(variable.numpy(), [-1.0, 1.0, 1.0, -1.0, 1.0, -1.0])


def test_bop_defaults_config_and_schedules():
    bop = Bop()
    assert float(bop.threshold.numpy()) == pytest.approx(1e-8) and float(bop.gamma.numpy()) == pytest.approx(1e-4)
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([1], [0.5, 0.125])
    bop = Bop(threshold=0.0, gamma=schedule)
    restored = Bop.from_config(bop.get_config())
    assert isinstance(restored.gamma, keras.optimizers.schedules.PiecewiseConstantDecay)
    variable = keras.Variable(np.ones(3, np.float32))
    m, gammas = np.zeros(3, np.float32), [0.5, 0.5, 0.125]  # PiecewiseConstantDecay: step <= 1 → 0.5
    for gamma in gammas:  # the schedule is read at Bop's own iteration count (0, 1, 2)
        bop.apply([tf.constant([-1.0, -2.0, 4.0])], [variable])
        m = m + np.float32(gamma) * (np.array([-1.0, -2.0, 4.0], np.float32) - m)
    np.testing.assert_allclose(bop.variables[-1].numpy(), m, rtol=1e-6)
    callable_gamma = Bop(gamma=lambda: 0.5)
    callable_gamma.apply([tf.constant([3.0])], [keras.Variable([1.0])])
    np.testing.assert_allclose(callable_gamma.variables[-1].numpy(), [1.5])


def test_bop_hyperparameters_are_settable_and_validated():
    bop = Bop()
    bop.gamma = 0.5
    bop.threshold = 1e-3
    assert float(bop.gamma.numpy()) == 0.5 and float(bop.threshold.numpy()) == pytest.approx(1e-3)
    assert Bop.from_config(bop.get_config()).get_config()["gamma"] == 0.5
    with pytest.raises(ste.errors.ParameterError, match="schedule"):
        Bop(gamma=keras.optimizers.schedules.ExponentialDecay(1e-3, 10, 0.5)).gamma = 0.1
    for bad in ({"gamma": 0.0}, {"gamma": 2.0}, {"threshold": -1.0}, {"gamma": float("nan")}, {"weight_decay": 0.1}):
        with pytest.raises(ste.errors.ParameterError):
            Bop(**bad)


def test_is_binary_variable_reads_the_kernel_quantizer_precision():
    def kernel(quantizer):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            layer = ste.layers.QuantDense(3, kernel_quantizer=quantizer)
        layer.build((None, 4))
        return layer

    assert Bop.is_binary_variable(kernel("ste_sign").kernel)
    assert Bop.is_binary_variable(kernel(ste.quantizers.NoOp(precision=1)).kernel)
    for quantizer in (None, ste.quantizers.NoOp(precision=8), "ste_tern", "dorefa(bits=2)"):
        assert not Bop.is_binary_variable(kernel(quantizer).kernel), quantizer
    layer = kernel(ste.quantizers.NoOp(precision=1))
    assert not Bop.is_binary_variable(layer.bias)
    layer.kernel_quantizer.precision = 4  # read from the layer's quantizer when asked
    assert not Bop.is_binary_variable(layer.kernel)
    separable = ste.layers.QuantSeparableConv2D(
        4, 3, depthwise_quantizer="ste_sign", pointwise_quantizer=None, depthwise_constraint="weight_clip"
    )
    separable.build((None, 8, 8, 2))
    assert Bop.is_binary_variable(separable.depthwise_kernel)
    assert not Bop.is_binary_variable(separable.pointwise_kernel)
    tagged = tf.Variable([1.0])
    tagged.precision = 1  # larq's convention
    assert Bop.is_binary_variable(tagged)
    assert not Bop.is_binary_variable(keras.Variable([1.0]))


def _built(model, optimizer):
    model.compile(optimizer, "sparse_categorical_crossentropy")
    model.optimizer.build(model.trainable_variables)
    return model


def test_case_optimizer_raises_on_overlap_and_on_an_optimizer_claiming_nothing():
    model = _models.binarized_mlp(hidden=8)
    overlap = CaseOptimizer(
        (Bop.is_binary_variable, Bop()), (lambda v: "kernel" in v.path, keras.optimizers.SGD()), name="case"
    )
    with pytest.raises(ste.errors.VariableAssignmentError, match="binary_1/kernel.*claimed by optimizers"):
        _built(model, overlap)
    idle = CaseOptimizer(
        (Bop.is_binary_variable, Bop()),
        (lambda v: False, keras.optimizers.SGD(name="idle")),
        default_optimizer=keras.optimizers.Adam(),
    )
    with pytest.raises(ste.errors.VariableAssignmentError, match="'idle'.*claims none"):
        _built(_models.binarized_mlp(hidden=8), idle)
    assert isinstance(ste.errors.VariableAssignmentError("x"), ValueError)


def test_case_optimizer_rejects_bad_arguments_early():
    adam = keras.optimizers.Adam()
    cases = [
        lambda: CaseOptimizer(),
        lambda: CaseOptimizer((Bop.is_binary_variable,)),
        lambda: CaseOptimizer(("not callable", Bop())),
        lambda: CaseOptimizer((Bop.is_binary_variable, "adam")),
        lambda: CaseOptimizer((Bop.is_binary_variable, adam), default_optimizer=adam),
        lambda: CaseOptimizer((Bop.is_binary_variable, Bop()), clipnorm=1.0),
    ]
    for make in cases:
        with pytest.raises(ste.errors.ParameterError):
            make()


def test_case_optimizer_without_default_leaves_unclaimed_variables_alone_with_a_warning():
    x, _, y, _ = _models.digits()
    model = _models.binarized_mlp(hidden=8)
    with pytest.warns(UserWarning, match="not trained"):
        model.compile(CaseOptimizer((Bop.is_binary_variable, Bop(gamma=0.1))), "sparse_categorical_crossentropy")
        before = _models.weights(model)
        model.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0)
    after = _models.weights(model)
    np.testing.assert_array_equal(after["bn_1/gamma"], before["bn_1/gamma"])
    assert set(np.unique(after["binary_1/kernel"])) == {-1.0, 1.0}


def test_bop_and_adam_train_a_binarized_network_on_digits_to_95_percent():
    x_train, x_test, y_train, y_test = _models.digits()
    model = _models.binarized_mlp()
    gamma = keras.optimizers.schedules.ExponentialDecay(1e-3, decay_steps=150, decay_rate=0.1)
    optimizer = _models.bop_adam(gamma=gamma, threshold=1e-6)
    model.compile(optimizer, "sparse_categorical_crossentropy", metrics=["accuracy"])
    initial = _models.weights(model)
    model.fit(x_train, y_train, batch_size=32, epochs=8, verbose=0)
    accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
    assert accuracy >= 0.95, accuracy
    trained = _models.weights(model)
    for kernel in ("binary_1/kernel", "binary_2/kernel"):
        assert set(np.unique(trained[kernel])) == {-1.0, 1.0}  # Bop's: binary, no latent weights
    assert not np.array_equal(trained["bn_1/gamma"], initial["bn_1/gamma"])  # Adam's
    bop, adam = optimizer.optimizers
    steps = int(np.ceil(len(x_train) / 32)) * 8
    assert int(optimizer.iterations.numpy()) == int(bop.iterations.numpy()) == int(adam.iterations.numpy()) == steps
    assert [v.path.split("/", 1)[1] for v in bop._trainable_variables] == ["binary_1/kernel", "binary_2/kernel"]


def _fit_steps(model, optimizer, epochs=1):
    x, _, y, _ = _models.digits()
    model.compile(optimizer, "sparse_categorical_crossentropy")
    model.fit(x[:128], y[:128], batch_size=32, epochs=epochs, shuffle=False, verbose=0)
    return model


def test_case_optimizer_under_mixed_precision():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = _fit_steps(
            _models.binarized_mlp(hidden=32, metrics=["flip_ratio"]), _models.bop_adam(gamma=1e-2), epochs=2
        )
    finally:
        keras.config.set_dtype_policy(previous)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    kernel = model.get_layer("binary_1").kernel
    assert kernel.dtype == "float32" and set(np.unique(kernel.numpy())) == {-1.0, 1.0}
    case = model.optimizer.inner_optimizer
    bop = case.optimizers[0]
    # 8 steps; the loss scale optimizer skips those with non-finite (scaled) gradients, for every sub-optimizer alike
    assert 6 <= int(bop.iterations.numpy()) == int(case.iterations.numpy()) <= 8
    assert np.any(bop.variables[-1].numpy() != 0) and np.all(np.isfinite(bop.variables[-1].numpy()))
    assert 0 < float(model.get_layer("binary_1").metrics[0].result()) < 1  # the float16 quantized kernel is compared


def _mirrored() -> tf.distribute.Strategy:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(devices) >= 2, "tests/conftest.py should provide two logical CPU devices"
    return tf.distribute.MirroredStrategy(devices[:2], cross_device_ops=tf.distribute.ReductionToOneDevice())


def test_case_optimizer_under_mirrored_strategy_matches_one_device():
    def run(strategy):
        with strategy.scope() if strategy else contextlib.nullcontext():
            model = _models.binarized_mlp(hidden=32, per_sample_norm=True, metrics=["flip_ratio"])
            optimizer = _models.bop_adam(gamma=1e-2, threshold=1e-5)
            model.compile(optimizer, "sparse_categorical_crossentropy")
        x, _, y, _ = _models.digits()
        history = model.fit(x[:128], y[:128], batch_size=32, epochs=1, shuffle=False, verbose=0)
        return _models.weights(model), _models.optimizer_state(optimizer), history.history["flip_ratio/binary_1"]

    (mirrored, mirrored_state, mirrored_flips), (single, single_state, single_flips) = run(_mirrored()), run(None)
    np.testing.assert_allclose(mirrored_flips, single_flips, rtol=1e-6)  # the flip ratio, replicated
    assert single_flips[0] > 0
    for key in single:
        np.testing.assert_allclose(mirrored[key], single[key], rtol=1e-5, atol=1e-6, err_msg=key)
    for a, b in zip(mirrored_state, single_state):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert set(np.unique(single["binary_1/kernel"])) == {-1.0, 1.0}


def _one_more_step(model):
    x, _, y, _ = _models.digits()
    model.train_on_batch(x[128:160], y[128:160])
    return _models.weights(model)


def test_case_optimizer_state_survives_a_tf_train_checkpoint(tmp_path):
    model = _fit_steps(_models.binarized_mlp(hidden=16), _models.bop_adam(gamma=1e-2))
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(str(tmp_path / "ckpt"))
    fresh = _models.binarized_mlp(hidden=16, seed=1)
    fresh.compile(_models.bop_adam(gamma=1e-2), "sparse_categorical_crossentropy")
    fresh.optimizer.build(fresh.trainable_variables)
    tf.train.Checkpoint(model=fresh, optimizer=fresh.optimizer).restore(path).assert_consumed()
    for a, b in zip(_models.optimizer_state(fresh.optimizer), _models.optimizer_state(model.optimizer)):
        np.testing.assert_array_equal(a, b)
    assert any(np.any(s != 0) for s in _models.optimizer_state(model.optimizer.optimizers[0])[4:])  # Bop's m
    expected, restored = _one_more_step(model), _one_more_step(fresh)
    for key in expected:
        np.testing.assert_allclose(restored[key], expected[key], rtol=1e-6, err_msg=key)


@pytest.mark.parametrize("predicate", ["registered", "lambda"])
def test_case_optimizer_saves_and_loads_in_a_keras_file(tmp_path, predicate):
    pick = Bop.is_binary_variable if predicate == "registered" else (lambda v: v.path.endswith("kernel"))
    optimizer = CaseOptimizer((pick, Bop(gamma=1e-2)), default_optimizer=keras.optimizers.Adam(0.01))
    model = _fit_steps(_models.binarized_mlp(hidden=16), optimizer)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert isinstance(loaded.optimizer, CaseOptimizer) and isinstance(loaded.optimizer.optimizers[0], Bop)
    for a, b in zip(_models.optimizer_state(loaded.optimizer), _models.optimizer_state(model.optimizer)):
        np.testing.assert_array_equal(a, b)
    expected, restored = _one_more_step(model), _one_more_step(loaded)
    for key in expected:
        np.testing.assert_allclose(restored[key], expected[key], rtol=1e-6, err_msg=key)


def test_unbuilt_case_optimizer_with_a_lambda_fails_at_save_not_at_load():
    optimizer = CaseOptimizer((lambda v: True, Bop()))
    with pytest.raises(ste.errors.ParameterError, match="cannot save predicate 0"):
        optimizer.get_config()


def test_a_restored_assignment_must_fit_the_model_it_is_built_on():
    model = _built(_models.binarized_mlp(hidden=8), _models.bop_adam())
    config = model.optimizer.get_config()
    assert [claim for _, claim in config["assignment"]] == [0, 1, 1, 0, 1, 1]  # Bop: the two binary kernels
    other = keras.Sequential([keras.Input((64,)), keras.layers.Dense(3)])
    with pytest.raises(ste.errors.VariableAssignmentError, match="saved assignment"):
        _built(other, CaseOptimizer.from_config(config))


def test_threshold_schedule_round_trips_and_is_read_at_bops_step():
    threshold = keras.optimizers.schedules.PiecewiseConstantDecay([0], [10.0, 0.0])  # step 0: 10, then 0
    bop = Bop.from_config(Bop(threshold=threshold, gamma=1.0).get_config())
    assert isinstance(bop.threshold, keras.optimizers.schedules.PiecewiseConstantDecay)
    variable = keras.Variable([1.0])
    bop.apply([tf.constant([1.0])], [variable])  # w·m = 1 <= τ = 10: kept
    assert variable.numpy().tolist() == [1.0]
    bop.apply([tf.constant([1.0])], [variable])  # w·m = 1 > τ = 0: flipped
    assert variable.numpy().tolist() == [-1.0]


# -- issue 22: refused instead of silently ignored; damaged saved configs -----------------------------------------


def test_bop_refuses_use_ema_and_learning_rate_as_larq_does():
    """larq's Bop (a legacy Keras optimizer) raises TypeError for both; Keras 3's EMA would overwrite ±1 weights
    with their averages after fit, and Bop has no learning rate."""
    with pytest.raises(ste.errors.CallError, match="use_ema") as error:
        Bop(use_ema=True)
    assert isinstance(error.value, TypeError)
    with pytest.raises(ste.errors.CallError, match="learning_rate.*gamma") as error:
        Bop(learning_rate=0.1)
    assert isinstance(error.value, TypeError)
    assert Bop(use_ema=False).get_config()["use_ema"] is False
    config = {**Bop(gamma=1e-3).get_config(), "learning_rate": 0.0}  # what Keras's base class may have written
    assert float(Bop.from_config(config).gamma.numpy()) == pytest.approx(1e-3)


def test_bop_with_use_ema_false_keeps_binary_kernels_after_fit():
    model = _fit_steps(_models.binarized_mlp(hidden=8), _models.bop_adam(gamma=1e-2))
    for layer in model.layers:
        if layer.name.startswith("binary"):
            assert set(np.unique(layer.kernel.numpy())) <= {-1.0, 1.0}


def _rewrite_optimizer_config(path, edit):
    """Rewrite the optimizer's config inside a .keras zip (config.json) with ``edit(config)``."""
    import json
    import zipfile

    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    document = json.loads(files["config.json"])
    edit(document["compile_config"]["optimizer"]["config"])
    files["config.json"] = json.dumps(document).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)


@pytest.mark.parametrize(
    ("damage", "error", "match"),
    [
        (lambda c: c["assignment"][0].__setitem__(1, -1), ste.errors.VariableAssignmentError, "never train"),
        (lambda c: c["assignment"][0].__setitem__(1, 7), ste.errors.VariableAssignmentError, "index from 0 to 1"),
        (lambda c: c["assignment"][0].pop(), ste.errors.VariableAssignmentError, "not \\[variable path"),
        (lambda c: c.__setitem__("assignment", "all"), ste.errors.VariableAssignmentError, "list of"),
        (lambda c: c.pop("optimizers"), ste.errors.ParameterError, "missing key"),
        (lambda c: c.pop("predicates"), ste.errors.ParameterError, "missing key"),
        (lambda c: c["predicates"].append(None), ste.errors.ParameterError, "2 predicate\\(s\\) for 1"),
        (lambda c: c.__setitem__("optimizers", {"a": 1}), ste.errors.ParameterError, "must be lists"),
        (lambda c: c["optimizers"].__setitem__(0, 3), ste.errors.ParameterError, "not a serialized"),
    ],
)
def test_a_damaged_case_optimizer_config_fails_to_load_with_an_ste_error(tmp_path, damage, error, match):
    model = _fit_steps(_models.binarized_mlp(hidden=8), _models.bop_adam(gamma=1e-2))
    path = tmp_path / "m.keras"
    model.save(path)
    _rewrite_optimizer_config(path, damage)
    with pytest.raises(error, match=match):
        keras.saving.load_model(path)
