"""``import ste`` changes nothing outside ste: it imports neither TensorFlow nor Keras, and the Keras and TensorFlow
functions ste patches (ste/_patches.py) are the same objects after it; the first op call installs the patches."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_python

ROOT = Path(__file__).resolve().parents[1]

#: Every attribute ste/_patches.py replaces, read in a process before and after ``import ste`` (and after the first
#: op call, where they are ste's).
_PROBE = """
import json, sys
import keras, tensorflow as tf
from keras.src.backend.tensorflow import trainer
from keras.src.legacy.saving import legacy_h5_format
from keras.src.saving import saving_lib

def identities():
    return {
        "saving_lib.save_model": id(saving_lib.save_model),
        "legacy_h5_format.save_model_to_hdf5": id(legacy_h5_format.save_model_to_hdf5),
        "TensorFlowTrainer._maybe_symbolic_build": id(trainer.TensorFlowTrainer.__dict__["_maybe_symbolic_build"]),
        "trainer.reduce_per_replica": id(trainer.reduce_per_replica),
        "MirroredStrategy._collective_key_base": id(tf.distribute.MirroredStrategy.__dict__["_collective_key_base"]),
    }

before = identities()
import ste
after_import = identities()
ste.forward(tf.sign).backward("straight_through")(tf.ones([1]))
after_call = identities()
print(json.dumps([before, after_import, after_call]))
"""


def test_import_ste_leaves_keras_and_tensorflow_as_they_were():
    before, after_import, after_call = json.loads(run_python(["-c", _PROBE], ROOT).stdout.splitlines()[-1])
    assert after_import == before
    assert all(after_call[name] != before[name] for name in before)  # the probe reads the patched attributes


def test_import_ste_imports_neither_tensorflow_nor_keras():
    loaded = run_python(["-c", "import json, sys, ste; print(json.dumps(sorted(sys.modules)))"], ROOT).stdout
    loaded = json.loads(loaded.splitlines()[-1])
    assert not {"tensorflow", "keras", "numpy"} & set(loaded)
