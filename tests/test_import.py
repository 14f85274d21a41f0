"""What ``import ste`` does: it registers ste's classes with Keras (tests/test_saved_files.py loads every family's file
in a fresh process after it) and nothing else outside ste. Keras's saving functions, its TensorFlow trainer and
``tf.distribute.MirroredStrategy`` are the same objects after it, TensorFlow's gradient registry gains no entry, ste
reads no ``sys.argv`` and installs no import hook. ste/_patches.py installs its patches when one of ste's layers is
created (the probe sees them change) or an op is first called (tests/training/test_distribute_fixes.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_python

ROOT = Path(__file__).resolve().parents[1]

#: In a fresh process: every attribute of the Keras and TensorFlow objects ste/_patches.py replaces (each module's and
#: class's whole namespace, so any other change shows too), compared by identity before and after ``import ste`` and
#: after a model of ste's layers is created (built later, so no op of ste has run), and TensorFlow's gradient registry
#: before and after each; ``sys.argv`` and
#: ``sys.orig_argv`` replaced by lists that record every read made with a module of ste on the stack.
_PROBE = """
import json, sys, traceback
import keras, tensorflow as tf
from keras.src.backend.tensorflow import trainer
from keras.src.legacy.saving import legacy_h5_format
from keras.src.saving import saving_api, saving_lib
from tensorflow.python.framework import ops

def namespaces():
    return {
        "saving_lib": dict(vars(saving_lib)),
        "saving_api": dict(vars(saving_api)),
        "legacy_h5_format": dict(vars(legacy_h5_format)),
        "keras.saving": dict(vars(keras.saving)),
        "keras.models": dict(vars(keras.models)),
        "keras.Model": dict(vars(keras.Model)),
        "trainer": dict(vars(trainer)),
        "TensorFlowTrainer": dict(vars(trainer.TensorFlowTrainer)),
        "MirroredStrategy": dict(vars(tf.distribute.MirroredStrategy)),
        "MultiWorkerMirroredStrategy": dict(vars(tf.distribute.MultiWorkerMirroredStrategy)),
    }

def changed(before, after):
    return sorted(
        f"{owner}.{name}"
        for owner in before
        for name in before[owner].keys() | after[owner].keys()
        if before[owner].get(name, changed) is not after[owner].get(name, changed)
    )

reads = []

class Tripwire(list):
    def _read(self):
        frames = [frame.filename for frame in traceback.extract_stack()[:-2]]
        if any("/ste/" in name.replace("\\\\", "/") for name in frames):
            reads.append(frames[-1])

for method in ("__getitem__", "__iter__", "__len__", "__contains__", "__reversed__", "index", "count", "copy"):
    def read(self, *args, _method=getattr(list, method)):
        self._read()
        return _method(self, *args)
    setattr(Tripwire, method, read)

sys.argv, sys.orig_argv = Tripwire(["list"]), Tripwire([sys.executable, "-m", "ste", "list"])
hooks = list(sys.meta_path), list(sys.path_hooks)
before = namespaces()
gradients = set(ops._gradient_registry.list())
import ste
after_import = namespaces()
gradients_after_import = set(ops._gradient_registry.list())
after_hooks = list(sys.meta_path), list(sys.path_hooks)
model = keras.Sequential([ste.layers.QuantConv2D(2, 3, kernel_quantizer="ste_sign"), ste.layers.BatchNormalization()])
after_layers = namespaces()
gradients_after_layers = set(ops._gradient_registry.list())
print(json.dumps({
    "changed_by_import": changed(before, after_import),
    "changed_by_layers": changed(before, after_layers),
    "gradients_added_by_import": sorted(gradients_after_import - gradients),
    "gradients_added_by_layers": sorted(gradients_after_layers - gradients),
    "model_built": model.built,
    "hooks_changed": [a != b for a, b in zip(hooks, after_hooks)],
    "argv_reads": reads,
    "ste_loaded": [hasattr(ste, name) for name in ("forward", "qat", "sparsity", "clustering", "spiking")],
}))
"""


def test_import_ste_changes_nothing_in_keras_or_tensorflow_and_reads_no_argv():
    found = json.loads(run_python(["-c", _PROBE], ROOT).stdout.splitlines()[-1])
    assert found["ste_loaded"] == [True] * 5  # import ste loaded its families
    assert found["changed_by_import"] == []
    assert found["gradients_added_by_import"] == []  # plain TensorFlow's registry: no gradient added by the import
    assert found["hooks_changed"] == [False, False]
    assert found["argv_reads"] == []
    # the probe sees a patch: creating ste's layers installs ste/_patches.py's patches in these namespaces
    assert not found["model_built"]
    assert found["changed_by_layers"] == [
        "MirroredStrategy._collective_key_base",
        "TensorFlowTrainer._maybe_symbolic_build",
        "legacy_h5_format.save_model_to_hdf5",
        "saving_lib.save_model",
        "trainer.reduce_per_replica",
    ]
    assert "Snapshot" in found["gradients_added_by_layers"]  # the snapshot_gradient patch, installed with the others


def test_the_argv_probe_sees_a_read_by_ste():
    """The tripwire of the probe above records a read of ``sys.argv`` made with code of ste on the stack (the command
    line's ``main``, and argparse called by it)."""
    probe = _PROBE.replace("import ste\n", "import ste\nfrom ste._tools._cli import main; main()\n", 1)
    found = json.loads(run_python(["-c", probe], ROOT).stdout.splitlines()[-1])
    assert any(Path(path).parts[-3:] == ("ste", "_tools", "_cli.py") for path in found["argv_reads"])


def test_every_public_layer_of_ste_applies_the_patches_when_created():
    """Keras's ``fit`` under several workers needs its fix before the model is built, which for a model without
    ``keras.Input`` happens inside ``fit``: each public Keras layer class of ste reaches, through the first
    ``__init__`` of ste in its class hierarchy, ``ste._patches.apply``."""
    import inspect

    import keras

    import ste

    layers = {
        f"ste.{family}.{name}": getattr(getattr(ste, family), name)
        for family in ste.__all__
        if inspect.ismodule(getattr(ste, family))
        for name in getattr(getattr(ste, family), "__all__", [])
        if inspect.isclass(getattr(getattr(ste, family), name))
        and issubclass(getattr(getattr(ste, family), name), keras.layers.Layer)
    }
    assert {
        "ste.layers.QuantDense",
        "ste.quantizers.Sign",
        "ste.spiking.LIF",
        "ste.sparsity.PruneLowMagnitude",
    } <= set(layers)
    missing = []
    for label, cls in layers.items():
        inits = [klass for klass in cls.__mro__ if "__init__" in vars(klass) and klass.__module__.startswith("ste.")]
        if not inits or "apply_patches" not in inits[-1].__init__.__code__.co_names:
            missing.append(label)
    assert missing == []
