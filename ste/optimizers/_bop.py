"""Bop, the binary optimizer (Helwegen et al. 2019, "Latent weights do not exist"), as a Keras 3 optimizer."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_number
from .._keras._configs import rebuild
from ..errors import CallError, ParameterError
from ..layers import kernel_precision
from . import _hyperparameters as hp

__all__ = ["Bop"]


@keras.saving.register_keras_serializable(package="ste")
class Bop(keras.optimizers.Optimizer):  # type: ignore[misc]
    """Bop: per weight, an exponential moving average of the gradient ``m ← m + γ·(g − m)``; the weight becomes
    ``sign(−sign(w·m − τ)·w)`` (sign(0) = +1), i.e. it flips when ``w·m > τ`` (|m| > τ and m has w's sign) and is
    otherwise held at ±1. larq's ``Bop``, same defaults.

    Bop keeps binary weights only: use it for the kernels of binarized layers through :class:`CaseOptimizer` with
    :meth:`is_binary_variable` and train every other variable with a latent-weight optimizer such as Adam.

    Args:
        threshold: τ, the momentum a weight needs to flip (default 1e-8).
        gamma: γ, the adaptivity rate of the moving average (default 1e-4), in (0, 1].
        name: the optimizer's name.
        **kwargs: Keras optimizer arguments (``clipnorm``, ``clipvalue``, ``global_clipnorm``,
            ``loss_scale_factor``, ``gradient_accumulation_steps``). Refused: ``weight_decay`` and ``use_ema=True``
            (each would move binary weights off ±1: Keras overwrites the weights with their moving average after
            ``fit``) and ``learning_rate`` (Bop has none; γ and τ set its steps), as larq's Bop refuses the last
            two with a TypeError.

    ``threshold`` and ``gamma`` are each a number (kept in a variable, so
    :class:`ste.callbacks.HyperparameterScheduler` can change it during training), a
    ``keras.optimizers.schedules.LearningRateSchedule`` (called with Bop's iteration count) or a callable without
    arguments. The update is computed in float32 (float64 for float64 weights) whatever the weights' dtype.
    """

    def __init__(self, threshold: Any = 1e-8, gamma: Any = 1e-4, name: str = "Bop", **kwargs: Any) -> None:
        if kwargs.pop("weight_decay", None) is not None:
            raise ParameterError(
                "Bop: weight_decay is not supported: it would move binary weights off ±1. Fix: leave it out; "
                "decay the other variables' optimizer instead."
            )
        if "learning_rate" in kwargs:
            raise CallError(
                f"Bop: it has no learning_rate (received learning_rate={kwargs['learning_rate']!r}); a weight flips "
                f"when its gradient's moving average m (rate gamma) exceeds threshold, so gamma and threshold set "
                f"how fast it learns. Fix: leave learning_rate out and tune gamma (default 1e-4) or threshold "
                f"(default 1e-8); the learning rate of the other variables belongs to CaseOptimizer's "
                f"default_optimizer. (larq's Bop refuses it too.)"
            )
        if kwargs.get("use_ema", False) is not False:
            raise CallError(
                f"Bop: use_ema={kwargs['use_ema']!r} is not supported: Keras would overwrite the binary weights "
                f"with their exponential moving average after fit, which is not ±1. Fix: leave use_ema out (Bop's "
                f"momentum m already averages the gradients); use it on the other variables' optimizer instead."
            )
        for key in ("clipnorm", "clipvalue", "global_clipnorm", "loss_scale_factor"):
            if kwargs.get(key) is not None:  # Keras checks them only in the first training step
                check_number("Bop", key, kwargs[key], positive=True)
        super().__init__(learning_rate=0.0, name=name, **kwargs)
        self._threshold = hp.make(self, "threshold", threshold, positive=False)
        self._gamma = hp.make(self, "gamma", gamma, positive=True)
        if isinstance(self._gamma, keras.Variable) and float(self._gamma.numpy()) > 1:
            raise ParameterError(f"Bop: gamma must be in (0, 1]; received {gamma!r}.")

    @property
    def threshold(self) -> Any:
        """τ: a variable (assignable: ``bop.threshold = 1e-7``) or the schedule given."""
        return self._threshold

    @threshold.setter
    def threshold(self, value: Any) -> None:
        self._set("threshold", value)

    @property
    def gamma(self) -> Any:
        """γ: a variable (assignable: ``bop.gamma = 1e-5``) or the schedule given."""
        return self._gamma

    @gamma.setter
    def gamma(self, value: Any) -> None:
        self._set("gamma", value)

    def _set(self, name: str, value: Any) -> None:
        held = getattr(self, f"_{name}")
        if not isinstance(held, keras.Variable):
            raise ParameterError(
                f"Bop: {name} was given as a schedule ({held!r}), so it cannot be set; create Bop with a number "
                f"{name} to change it during training."
            )
        held.assign(float(value))

    def build(self, variables: list[Any]) -> None:
        if self.built:
            return
        super().build(variables)
        self._momentums = self.add_optimizer_variables(variables, "m")

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        m = self._momentums[self._get_variable_index(variable)]
        wide = tf.float64 if variable.dtype == tf.float64 else tf.float32
        gamma = tf.cast(hp.current(self._gamma, self.iterations), wide)
        threshold = tf.cast(hp.current(self._threshold, self.iterations), wide)
        m_t = tf.cast(m, wide) + gamma * (tf.cast(tf.convert_to_tensor(gradient), wide) - tf.cast(m, wide))
        w = tf.cast(variable, wide)
        self.assign(m, m_t)
        flipped = -tf.sign(w * m_t - threshold) * w
        self.assign(variable, tf.where(flipped >= 0, tf.ones_like(w), -tf.ones_like(w)))

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.pop("learning_rate", None)
        config.pop("weight_decay", None)
        return {**config, "threshold": hp.serialize_value(self._threshold), "gamma": hp.serialize_value(self._gamma)}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> Bop:
        def build(config: dict[str, Any]) -> Bop:
            config.pop("learning_rate", None)  # a config written by Keras's base class: Bop has no learning rate
            for name in ("threshold", "gamma"):
                if name in config:
                    config[name] = hp.deserialize_value(config[name], custom_objects)
            return cls(**config)

        return rebuild(cls, config, build)

    @staticmethod
    def is_binary_variable(variable: Any) -> bool:
        """True for a kernel whose ``ste`` quantized layer quantizes it to 1 bit (e.g. ``"sign"`` or
        ``ste.quantizers.NoOp(precision=1)``; see :func:`ste.layers.kernel_precision`), or a variable with larq's
        ``precision == 1`` attribute. A :class:`CaseOptimizer` predicate."""
        return kernel_precision(variable) == 1


keras.saving.register_keras_serializable(package="ste", name="Bop.is_binary_variable")(Bop.is_binary_variable)
