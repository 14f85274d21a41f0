"""Training callbacks for pruned models: :class:`UpdatePruningStep` (required by ``fit``) and
:class:`PruningSummaries` (TensorBoard scalars), TFMOT's names and hooks (``on_epoch_end(batch=...)``,
``on_epoch_begin(epoch=...)`` in a custom loop, as TFMOT's guide calls them)."""

from __future__ import annotations

import os
import warnings
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ..errors import ParameterError
from ._wrapper import _CALLBACK_FLAG, PruneLowMagnitude

__all__ = ["PruningSummaries", "UpdatePruningStep", "pruned_layers"]


def pruned_layers(model: Any) -> list[PruneLowMagnitude]:
    """Every :class:`PruneLowMagnitude` of ``model``, nested models included (each once)."""
    found: dict[int, PruneLowMagnitude] = {}
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, PruneLowMagnitude):
            found.setdefault(id(layer), layer)
    return list(found.values())


def _restore_legacy_optimizer(model: Any, layers: list[PruneLowMagnitude]) -> None:
    """Rebuild ``model``'s optimizer when ``keras.models.load_model`` of a legacy ``.h5`` file built it without the
    model's variables, and continue its step count from the pruned layers' steps.

    Keras 3's HDF5 loader (``legacy_h5_format.load_model_from_hdf5``) builds the optimizer with
    ``model._trainable_variables``, the variables a model creates itself: none for a functional or Sequential model.
    The optimizer then knows no variable (its saved state does not fit it and is dropped with a logged warning), and
    the first training step raises "Unknown variable". Every Keras model loaded so is affected; a pruned model also
    loses its step count, which the schedule reads from the optimizer's iterations."""
    optimizer = getattr(model, "optimizer", None)
    known = getattr(optimizer, "_trainable_variables", None)
    variables = list(model.trainable_variables)
    if optimizer is None or not getattr(optimizer, "built", False) or known is None or known or not variables:
        return
    optimizer.built = False
    with getattr(
        model, "distribute_strategy", tf.distribute.get_strategy()
    ).scope():  # the model's own variables' scope
        optimizer.build(variables)
    steps = [int(layer.pruning_step.numpy()) for layer in layers if layer.built]
    iterations = int(optimizer.iterations.numpy())
    if steps and max(steps) > iterations:
        optimizer.iterations.assign(max(steps))
    warnings.warn(
        f"ste.sparsity.UpdatePruningStep: the model's optimizer ({type(optimizer).__name__}) was built without the "
        f"model's variables, as keras.models.load_model builds it from a legacy .h5 file, and would raise 'Unknown "
        f"variable' at the first step. It is rebuilt for the model's {len(variables)} trainable variables and "
        f"continues from step {max([iterations, *steps])}; the state it had (momenta, moments) was not loaded. Fix: "
        f"save to .keras (model.save('model.keras')), which keeps the optimizer's state.",
        UserWarning,
        stacklevel=2,
    )


class UpdatePruningStep(keras.callbacks.Callback):  # type: ignore[misc]
    """Keeps each pruned layer's step at the optimizer's iteration count + 1 in every training call, and sets the
    pruned weights to ``weight · mask`` at the end of each epoch (TFMOT's callback; ``fit`` needs it).

    In ``fit`` the layers read the step from the model's optimizer inside the training step itself, so that no
    Python work or eager assignment runs between batches. In a custom training loop, where the optimizer that
    applies the gradients may not be the model's: ``callback.set_model(model)``, ``callback.on_train_begin()`` once,
    then ``callback.on_train_batch_begin(step)`` before each step (and ``on_epoch_end(epoch)`` to re-mask); the
    callback then counts the batches and sets each layer's step before every one.

    A model loaded from a legacy ``.h5`` file, whose optimizer Keras builds without the model's variables, keeps
    training: the callback rebuilds that optimizer at the start of ``fit`` and warns that its state was not loaded.
    """

    def __init__(self) -> None:
        super().__init__()
        self.step = 0
        self.prunable_layers: list[PruneLowMagnitude] = []

    def on_train_begin(self, logs: Any = None) -> None:
        self.prunable_layers = pruned_layers(self.model)
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)
        # fit builds its train function before on_train_begin; a loop driving the callback by hand has none
        in_fit = iterations is not None and getattr(self.model, "train_function", None) is not None
        self._in_graph = in_fit
        if in_fit:
            _restore_legacy_optimizer(self.model, self.prunable_layers)
        for layer in self.prunable_layers:
            setattr(layer, _CALLBACK_FLAG, True)
            layer._set_step_source(iterations if in_fit else None)
        self.step = int(keras.ops.convert_to_numpy(iterations)) if iterations is not None else 0

    def on_train_batch_begin(self, batch: Any, logs: Any = None) -> None:
        if not getattr(self, "_in_graph", False):
            for layer in self.prunable_layers:
                if layer.built:
                    layer.pruning_step.assign(self.step)
        self.step += 1

    def on_epoch_end(self, epoch: Any = None, logs: Any = None, *, batch: Any = None) -> None:
        """Set the masked-gradient layers' weights to ``weight · mask``. Keras passes the epoch; TFMOT's signature
        is ``on_epoch_end(batch, logs=None)`` and its guide calls ``on_epoch_end(batch=-1)``: both are accepted (the
        value is not used)."""
        for layer in self.prunable_layers:
            if layer.built and layer.gradient == "masked":
                layer.apply_masks()


class PruningSummaries(keras.callbacks.TensorBoard):  # type: ignore[misc]
    """TensorBoard's callback plus every mask's sparsity (``<mask>/sparsity``) and threshold
    (``<threshold>/threshold``) in ``log_dir/train``, at the optimizer's iteration count (the pruning step in a loop
    without a compiled optimizer), written at the start of each epoch (TFMOT's hook: its guide's custom loop calls
    ``on_epoch_begin(epoch=-1)``) and at its end (TFMOT's ``PruningSummaries``). ``log_dir`` must be a non-empty path.
    """

    def __init__(self, log_dir: str, update_freq: Any = "epoch", **kwargs: Any) -> None:
        if not isinstance(log_dir, (str, os.PathLike)) or not os.fspath(log_dir):
            shown = repr(log_dir) if len(repr(log_dir)) <= 60 else repr(log_dir)[:57] + "..."
            raise ParameterError(
                f"ste.sparsity.PruningSummaries: log_dir must be a non-empty path (the TensorBoard log directory); "
                f"received {shown} ({type(log_dir).__name__}). Fix: pass a directory, e.g. "
                f"PruningSummaries(log_dir='logs/pruning')."
            )
        super().__init__(log_dir=os.fspath(log_dir), update_freq=update_freq, **kwargs)
        self._pruning_writer: Any = None

    def _step(self, layers: list[PruneLowMagnitude]) -> int:
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            return int(optimizer.iterations.numpy())
        steps = [int(layer.pruning_step.numpy()) for layer in layers if layer.built]
        return max([0, *steps])

    def _log_pruning(self) -> None:
        if self._pruning_writer is None:
            self._pruning_writer = tf.summary.create_file_writer(os.path.join(self.log_dir, "train"))
        layers = pruned_layers(self.model)
        step = self._step(layers)
        with self._pruning_writer.as_default():
            for layer in layers:
                for _, mask, threshold in layer.pruning_vars:
                    sparsity = 1.0 - float(np.mean(mask.numpy()))
                    tf.summary.scalar(f"{mask.path}/sparsity", sparsity, step=step)
                    tf.summary.scalar(f"{threshold.path}/threshold", float(threshold.numpy()), step=step)
        self._pruning_writer.flush()

    def on_epoch_begin(self, epoch: Any = None, logs: Any = None) -> None:
        super().on_epoch_begin(epoch, logs)
        self._log_pruning()

    def on_epoch_end(self, epoch: Any = None, logs: Any = None) -> None:
        super().on_epoch_end(epoch, logs)
        self._log_pruning()

    def on_train_end(self, logs: Any = None) -> None:
        super().on_train_end(logs)
        if self._pruning_writer is not None:
            self._pruning_writer.close()
            self._pruning_writer = None
