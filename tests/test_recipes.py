"""The three recipe scripts in examples/ (shown on the docs' recipe pages): they run, and compute what they say.

Each script is loaded in this process (a fresh TensorFlow import per script would cost seconds); its gradients are
compared with numpy back-propagation written here.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str) -> dict:
    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=f"recipe_{name}")


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no exp overflow


def _dense_grads(model, features, targets):
    """dLoss/dkernel of the layer named 'hidden' under tf autodiff, and the numpy pieces needed to check it."""
    hidden, out = model.get_layer("hidden"), model.get_layer("out")
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(features) - targets) ** 2)
    grad = tape.gradient(loss, hidden.kernel).numpy()
    w1, b1 = (v.numpy() for v in hidden.weights)
    w2, b2 = (v.numpy() for v in out.weights)
    return grad, w1, b1, w2, b2


def test_recipe_activation_gradient(capsys, tmp_path):
    recipe = _load("recipe_activation_gradient")
    x = np.linspace(-4.0, 4.0, 17).astype(np.float32)
    y, grad = recipe["forward_and_gradient"](recipe["relu_with_sigmoid_gradient"], tf.constant(x))
    np.testing.assert_array_equal(y, np.maximum(x, 0.0))
    np.testing.assert_allclose(grad, _sigmoid(x) * (1.0 - _sigmoid(x)), rtol=1e-5, atol=1e-7)

    model = recipe["build_model"]()
    features, targets = recipe["data"](n=32)
    grad, w1, b1, w2, b2 = _dense_grads(model, features, targets)
    h = features @ w1 + b1
    prediction = np.maximum(h, 0.0) @ w2 + b2
    d_prediction = 2.0 * (prediction - targets) / len(targets)
    d_h = (d_prediction @ w2.T) * _sigmoid(h) * (1.0 - _sigmoid(h))  # sigmoid', not relu'
    np.testing.assert_allclose(grad, features.T @ d_h, rtol=1e-4, atol=1e-6)

    recipe["main"](str(tmp_path))
    assert "training loss" in capsys.readouterr().out
    # the saved model reloads (safe_mode, no custom_objects) and still back-propagates sigmoid' through relu
    restored = keras.models.load_model(tmp_path / "activation_gradient.keras")
    grad, w1, b1, w2, b2 = _dense_grads(restored, features, targets)
    h = features @ w1 + b1
    prediction = np.maximum(h, 0.0) @ w2 + b2
    d_h = ((2.0 * (prediction - targets) / len(targets)) @ w2.T) * _sigmoid(h) * (1.0 - _sigmoid(h))
    np.testing.assert_allclose(grad, features.T @ d_h, rtol=1e-4, atol=1e-6)


def test_recipe_differentiable_mask(capsys):
    recipe = _load("recipe_differentiable_mask")
    score = np.linspace(-2.0, 2.0, 21).astype(np.float32)
    s = tf.constant(score)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(s)
        soft, straight = recipe["hard_mask"](s), recipe["straight_mask"](s)
    np.testing.assert_array_equal(soft.numpy(), (score > 0).astype(np.float32))
    np.testing.assert_array_equal(straight.numpy(), (score > 0).astype(np.float32))
    sig = _sigmoid(4.0 * score)
    np.testing.assert_allclose(tape.gradient(soft, s).numpy(), 4.0 * sig * (1.0 - sig), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(tape.gradient(straight, s).numpy(), np.ones_like(score))

    learned, true_mask = recipe["learn_mask"]()
    np.testing.assert_array_equal(learned, true_mask)

    recipe["main"]()
    assert "learned mask" in capsys.readouterr().out


def test_recipe_skip_derivative(capsys, tmp_path):
    recipe = _load("recipe_skip_derivative")
    x = np.linspace(-3.0, 3.0, 13).astype(np.float32)
    t = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(t)
        y = recipe["tanh_skip"](t)
    np.testing.assert_allclose(y.numpy(), np.tanh(x), rtol=1e-6)
    np.testing.assert_array_equal(tape.gradient(y, t).numpy(), np.ones_like(x))

    model = recipe["build_model"]()
    rng = np.random.default_rng(1)
    features = rng.normal(size=(16, 4)).astype(np.float32)
    targets = rng.normal(size=(16, 1)).astype(np.float32)
    grad, w1, b1, w2, b2 = _dense_grads(model, features, targets)
    h = features @ w1 + b1
    prediction = np.tanh(h) @ w2 + b2  # the forward keeps tanh ...
    np.testing.assert_allclose(model(features).numpy(), prediction, rtol=1e-5, atol=1e-6)
    d_prediction = 2.0 * (prediction - targets) / len(targets)
    d_h = d_prediction @ w2.T  # ... the backward skips its derivative
    np.testing.assert_allclose(grad, features.T @ d_h, rtol=1e-4, atol=1e-6)

    recipe["main"](str(tmp_path))
    assert "saved and reloaded" in capsys.readouterr().out
    assert (tmp_path / "skip_derivative.keras").exists()


@pytest.mark.parametrize("name", ["recipe_activation_gradient", "recipe_skip_derivative"])
def test_recipe_run_as_a_script_leaves_no_file_behind(name, capsys, monkeypatch, tmp_path):
    """Run as a script, a recipe saves into a fresh temporary directory and removes it: no fixed path."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where tempfile makes its directories
    _load(name)["main"]()
    printed = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("saved and reloaded"))
    saved = Path(printed.split(": ", 1)[1])
    assert saved.parent.parent == tmp_path and saved.parent != tmp_path
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["recipe_activation_gradient", "recipe_differentiable_mask", "recipe_skip_derivative"])
def test_recipe_page_shows_the_script(name):
    """Each recipe page includes its script verbatim (pymdownx.snippets), so the page shows the tested code."""
    pages = (Path(__file__).resolve().parents[1] / "docs" / "recipes").glob("*.md")
    assert any(f'--8<-- "examples/{name}.py"' in page.read_text() for page in pages)
