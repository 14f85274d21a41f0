"""Training callbacks for pruned models: :class:`UpdatePruningStep` (required by ``fit``) and
:class:`PruningSummaries` (TensorBoard scalars), TFMOT's names."""

from __future__ import annotations

import os
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ._wrapper import _CALLBACK_FLAG, PruneLowMagnitude

__all__ = ["PruningSummaries", "UpdatePruningStep", "pruned_layers"]


def pruned_layers(model: Any) -> list[PruneLowMagnitude]:
    """Every :class:`PruneLowMagnitude` of ``model``, nested models included (each once)."""
    found: dict[int, PruneLowMagnitude] = {}
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, PruneLowMagnitude):
            found.setdefault(id(layer), layer)
    return list(found.values())


class UpdatePruningStep(keras.callbacks.Callback):  # type: ignore[misc]
    """Keeps each pruned layer's step at the optimizer's iteration count + 1 in every training call, and sets the
    pruned weights to ``weight · mask`` at the end of each epoch (TFMOT's callback; ``fit`` needs it).

    In ``fit`` the layers read the step from the model's optimizer inside the training step itself, so that no
    Python work or eager assignment runs between batches. In a custom training loop, where the optimizer that
    applies the gradients may not be the model's: ``callback.set_model(model)``, ``callback.on_train_begin()`` once,
    then ``callback.on_train_batch_begin(step)`` before each step (and ``on_epoch_end(epoch)`` to re-mask); the
    callback then counts the batches and sets each layer's step before every one.
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

    def on_epoch_end(self, epoch: Any, logs: Any = None) -> None:
        for layer in self.prunable_layers:
            if layer.built and layer.gradient == "masked":
                layer.apply_masks()


class PruningSummaries(keras.callbacks.TensorBoard):  # type: ignore[misc]
    """TensorBoard's callback plus, at the end of each epoch, every mask's sparsity (``<mask>/sparsity``) and
    threshold (``<threshold>/threshold``) at the optimizer's iteration count, in ``log_dir/train`` (TFMOT's
    ``PruningSummaries``)."""

    def __init__(self, log_dir: str, update_freq: Any = "epoch", **kwargs: Any) -> None:
        super().__init__(log_dir=log_dir, update_freq=update_freq, **kwargs)
        self._pruning_writer: Any = None

    def on_epoch_end(self, epoch: Any, logs: Any = None) -> None:
        super().on_epoch_end(epoch, logs)
        if self._pruning_writer is None:
            self._pruning_writer = tf.summary.create_file_writer(os.path.join(self.log_dir, "train"))
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        with self._pruning_writer.as_default():
            for layer in pruned_layers(self.model):
                for _, mask, threshold in layer.pruning_vars:
                    sparsity = 1.0 - float(np.mean(keras.ops.convert_to_numpy(mask.value)))
                    tf.summary.scalar(f"{mask.path}/sparsity", sparsity, step=step)
                    tf.summary.scalar(
                        f"{threshold.path}/threshold", float(keras.ops.convert_to_numpy(threshold.value)), step=step
                    )
        self._pruning_writer.flush()

    def on_train_end(self, logs: Any = None) -> None:
        super().on_train_end(logs)
        if self._pruning_writer is not None:
            self._pruning_writer.close()
            self._pruning_writer = None
