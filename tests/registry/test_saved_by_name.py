"""A neuron or pruning schedule registered by ste name only (``ste.spiking.register_neuron``,
``ste.sparsity.register_schedule``) is usable in a saved model as a built-in one is: the model saves and loads, in the
same process and in a fresh one that imports only the module registering it. References: numpy's recurrence of the
neuron and the schedule's own formula, computed here."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from tests.helpers import run_python

ROOT = Path(__file__).resolve().parents[2]

#: The user's module: a neuron and a schedule registered by ste name only (no keras.saving registration).
USER_MODULE = '''
import tensorflow as tf
import ste


@ste.spiking.register_neuron("doubling_integrator")
class DoublingIntegrator(ste.spiking.LICell):
    """U[t] = U[t-1] + 2 X[t], output U[t]."""

    def step(self, inputs, states):
        return states[0] + 2 * inputs, None, []


@ste.sparsity.register_schedule("two_stage")
class TwoStage(ste.sparsity.PruningSchedule):
    """s1 before switch_step, s2 from it, pruning every step from step 0."""

    def __init__(self, s1, s2, switch_step):
        self.s1, self.s2, self.switch_step = s1, s2, switch_step

    def __call__(self, step):
        sparsity = tf.where(tf.cast(step, tf.int64) < self.switch_step, self.s1, self.s2)
        return self.should_prune_in_step(step, 0, -1, 1), tf.cast(sparsity, tf.float32)

    def get_config(self):
        return {"s1": self.s1, "s2": self.s2, "switch_step": self.switch_step}
'''

#: In a fresh process: import the user's module only, load both files, print what they compute.
LOAD = """
import json, sys
import numpy as np, keras
import user_entries_saved_by_name
neuron = keras.models.load_model(sys.argv[1])
pruned = keras.models.load_model(sys.argv[2])
x = np.load(sys.argv[3])
schedule = pruned.layers[0].pruning_schedule
print(json.dumps({
    "spikes": neuron(x).numpy().tolist(),
    "schedule": type(schedule).__name__,
    "sparsities": [float(schedule(step)[1]) for step in (0, 1, 2, 3)],
}))
"""


@pytest.fixture(scope="module")
def user_module(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("user")
    (folder / "user_entries_saved_by_name.py").write_text(USER_MODULE, encoding="utf-8")
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module("user_entries_saved_by_name")
        yield folder, module
    finally:
        sys.path.remove(str(folder))
        import ste

        ste.spiking.unregister_neuron("doubling_integrator")
        ste.sparsity.unregister_schedule("two_stage")


def _expected_membrane(model: keras.Model, x: np.ndarray) -> np.ndarray:
    """numpy's U[t] = U[t-1] + 2 (x[t] W + b), U[-1] = 0."""
    kernel, bias = (w.numpy() for w in model.layers[0].weights[:2])
    return np.cumsum(2 * (x @ kernel + bias), axis=1)


def test_a_registered_neuron_and_schedule_save_and_load(user_module, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import ste

    folder, module = user_module
    keras.utils.set_random_seed(0)
    neuron = keras.Sequential([keras.Input((5, 3)), ste.spiking.SpikingDense(4, neuron="doubling_integrator")])
    x = np.random.default_rng(1).uniform(0.0, 1.0, size=(2, 5, 3)).astype("float32")
    np.testing.assert_allclose(neuron(x).numpy(), _expected_membrane(neuron, x), rtol=1e-5, atol=1e-5)
    schedule = module.TwoStage(0.25, 0.5, switch_step=2)
    pruned = ste.sparsity.prune_low_magnitude(
        keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)]), pruning_schedule=schedule
    )
    neuron.save(tmp_path / "neuron.keras")
    pruned.save(tmp_path / "pruned.keras")
    np.save(tmp_path / "x.npy", x)

    loaded = keras.models.load_model(tmp_path / "neuron.keras")  # this process
    np.testing.assert_allclose(loaded(x).numpy(), _expected_membrane(neuron, x), rtol=1e-5, atol=1e-5)
    loaded_schedule = keras.models.load_model(tmp_path / "pruned.keras").layers[0].pruning_schedule
    assert type(loaded_schedule) is module.TwoStage
    assert [float(loaded_schedule(step)[1]) for step in range(4)] == [0.25, 0.25, 0.5, 0.5]

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)])}
    args: list[str | Path] = ["-c", LOAD, tmp_path / "neuron.keras", tmp_path / "pruned.keras", tmp_path / "x.npy"]
    fresh = json.loads(run_python(args, ROOT, env=env).stdout.splitlines()[-1])  # a fresh process
    np.testing.assert_allclose(np.array(fresh["spikes"]), _expected_membrane(neuron, x), rtol=1e-5, atol=1e-5)
    assert fresh["schedule"] == "TwoStage" and fresh["sparsities"] == [0.25, 0.25, 0.5, 0.5]
