"""``CaseOptimizer``: each variable trained by exactly one of several Keras 3 optimizers, chosen by predicates."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import keras

from ..errors import ParameterError, ParameterTypeError, VariableAssignmentError

__all__ = ["CaseOptimizer"]

Predicate = Callable[[Any], bool]


def _serializable_predicate(predicate: Predicate) -> bool:
    """True when Keras can save ``predicate`` by name and find it again at load (registered or module-level)."""
    if keras.saving.get_registered_object(keras.saving.get_registered_name(predicate)) is predicate:
        return True
    module = sys.modules.get(getattr(predicate, "__module__", "") or "")
    name = getattr(predicate, "__name__", "")
    return name != "<lambda>" and module is not None and getattr(module, name, None) is predicate


@keras.saving.register_keras_serializable(package="ste")
class CaseOptimizer(keras.optimizers.Optimizer):  # type: ignore[misc]
    """Trains each variable with exactly one optimizer: the one whose predicate claims it, else ``default_optimizer``.

    Like larq's ``CaseOptimizer`` (modelled on ``tf.case``)::

        CaseOptimizer((ste.optimizers.Bop.is_binary_variable, ste.optimizers.Bop()),
                      default_optimizer=keras.optimizers.Adam(0.01))

    Args:
        *predicate_optimizer_pairs: ``(predicate, optimizer)`` pairs; ``predicate(variable)`` returns True when
            ``optimizer`` should train the (Keras) variable.
        default_optimizer: trains every variable no predicate claims (``None``: such variables are not trained,
            with a warning).
        name: the optimizer's name.

    The assignment is made when the optimizer is built (``model.compile``/``fit`` build it on the model's trainable
    variables): a variable claimed by two predicates, or a pair whose predicate claims no variable, raises
    :class:`ste.errors.VariableAssignmentError` then, before any variable changes. Each optimizer keeps its own state
    and iteration count; ``variables`` lists this optimizer's own (its iteration count) followed by each optimizer's.
    ``learning_rate`` reads and sets the default optimizer's (the first pair's without one), so Keras's
    learning-rate callbacks act on it. Saving: the predicates are saved by name when Keras can find them again
    (registered with ``keras.saving.register_keras_serializable``, or module-level functions); the assignment
    itself, by variable path, is always saved once built, so a lambda predicate also reloads.
    """

    def __init__(
        self,
        *predicate_optimizer_pairs: tuple[Predicate, keras.optimizers.Optimizer],
        default_optimizer: keras.optimizers.Optimizer | None = None,
        name: str = "case_optimizer",
        **kwargs: Any,
    ) -> None:
        assignment = kwargs.pop("assignment", None)
        if kwargs:
            raise ParameterError(
                f"CaseOptimizer: unsupported argument(s) {sorted(kwargs)}; gradient clipping, EMA, weight decay and "
                f"accumulation belong to the optimizers it dispatches to. Fix: pass them to those optimizers."
            )
        optimizers: list[keras.optimizers.Optimizer] = []
        predicates: list[Predicate | None] = []
        for index, pair in enumerate(predicate_optimizer_pairs):
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ParameterTypeError(
                    f"CaseOptimizer: argument {index} must be a (predicate, optimizer) pair; received {pair!r}."
                )
            predicate, optimizer = pair
            if predicate is not None and not callable(predicate):
                raise ParameterTypeError(
                    f"CaseOptimizer: pair {index}: the predicate must be callable(variable) -> bool; "
                    f"received {predicate!r}."
                )
            predicates.append(predicate)
            optimizers.append(optimizer)
        if not optimizers:
            raise ParameterError("CaseOptimizer: give at least one (predicate, optimizer) pair.")
        if default_optimizer is not None:
            optimizers.append(default_optimizer)
        for index, optimizer in enumerate(optimizers):
            if not isinstance(optimizer, keras.optimizers.Optimizer) or isinstance(optimizer, CaseOptimizer):
                raise ParameterTypeError(
                    f"CaseOptimizer: optimizer {index} must be a Keras 3 optimizer (keras.optimizers.Optimizer, not "
                    f"a CaseOptimizer); received {optimizer!r}."
                )
            if any(optimizer is other for other in optimizers[:index]):
                raise ParameterError(
                    f"CaseOptimizer: optimizer {optimizer.name!r} appears twice; each pair needs its own instance."
                )
        super().__init__(learning_rate=0.0, name=name)
        self._predicates = predicates
        self._optimizers = optimizers
        self._has_default = default_optimizer is not None
        self._saved_assignment = _checked_assignment(assignment, len(optimizers)) if assignment else None
        self._assignment: dict[Any, int] = {}
        self._paths: list[tuple[str, int | None]] = []

    @property
    def optimizers(self) -> list[keras.optimizers.Optimizer]:
        """The optimizers of the pairs, in order, then the default optimizer (if any)."""
        return list(self._optimizers)

    @property
    def default_optimizer(self) -> keras.optimizers.Optimizer | None:
        return self._optimizers[-1] if self._has_default else None

    def _main(self) -> keras.optimizers.Optimizer:
        return self._optimizers[-1] if self._has_default else self._optimizers[0]

    @property
    def learning_rate(self) -> Any:
        return self._main().learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        if not hasattr(self, "_optimizers"):  # during keras.optimizers.Optimizer.__init__
            return
        self._main().learning_rate = value

    @property
    def variables(self) -> list[Any]:
        own: list[Any] = self._variables[:]
        for optimizer in self._optimizers:
            own.extend(optimizer.variables)
        return own

    def _claim(self, variable: Any) -> int | None:
        """The index of the optimizer that trains ``variable`` (None: not trained)."""
        path = getattr(variable, "path", None)
        claims = [i for i, predicate in enumerate(self._predicates) if predicate is not None and predicate(variable)]
        if len(claims) > 1:
            raise VariableAssignmentError(
                f"CaseOptimizer: variable {path or variable!r} is claimed by optimizers "
                f"{[self._optimizers[i].name for i in claims]}; each variable must go to exactly one. Fix: make "
                f"the predicates exclusive."
            )
        if claims:
            return claims[0]
        if self._has_default:
            return len(self._optimizers) - 1
        warnings.warn(
            f"CaseOptimizer: no predicate claims variable {path or variable!r} and there is no default_optimizer, "
            f"so it is not trained. Fix: pass default_optimizer=... to train it.",
            UserWarning,
            stacklevel=4,
        )
        return None

    def build(self, variables: list[Any]) -> None:
        if self.built:
            return
        variables = list(variables)
        claims = self._restored_claims(variables) if self._saved_assignment else [self._claim(v) for v in variables]
        for index in range(len(self._predicates)):
            if index not in claims:
                raise VariableAssignmentError(
                    f"CaseOptimizer: optimizer {self._optimizers[index].name!r} (pair {index}) claims none of the "
                    f"{len(variables)} variables it was built on. Fix: check its predicate (e.g. "
                    f"Bop.is_binary_variable needs kernels quantized to 1 bit, such as kernel_quantizer='sign' "
                    f"or ste.quantizers.NoOp(precision=1)), or drop the pair."
                )
        for index, optimizer in enumerate(self._optimizers):
            optimizer.build([v for v, claim in zip(variables, claims) if claim == index])
        super().build(variables)
        self._assignment = {self._var_key(v): c for v, c in zip(variables, claims) if c is not None}
        self._paths = [(str(getattr(v, "path", v.name)), c) for v, c in zip(variables, claims)]

    def _restored_claims(self, variables: list[Any]) -> list[int | None]:
        """The saved assignment (in the order the optimizer was built on, as Keras rebuilds it after loading)."""
        saved = self._saved_assignment or []
        paths = [str(getattr(v, "path", v.name)) for v in variables]
        # A loaded model's variable paths may lack the model name ("binary_1/kernel", not "sequential/binary_1/kernel").
        same = len(saved) == len(paths) and all(
            ("/" + a).endswith("/" + b) or ("/" + b).endswith("/" + a) for (a, _), b in zip(saved, paths)
        )
        if not same:
            raise VariableAssignmentError(
                f"CaseOptimizer: the saved assignment covers variables {[p for p, _ in saved]}, but the optimizer is "
                f"being built on {paths}. Fix: load the optimizer with the model it was saved with."
            )
        return [claim for _, claim in saved]

    def apply(self, grads: Any, trainable_variables: Any = None) -> None:
        if trainable_variables is None:
            if not self.built:
                raise VariableAssignmentError(
                    "CaseOptimizer: apply(grads) without variables needs a built optimizer. Fix: call "
                    "optimizer.build(model.trainable_variables) first, or pass the variables."
                )
            trainable_variables = self._trainable_variables
        trainable_variables = list(trainable_variables)
        if not self.built:
            self.build(trainable_variables)
        groups: list[tuple[list[Any], list[Any]]] = [([], []) for _ in self._optimizers]
        for grad, variable in zip(grads, trainable_variables):
            claim = self._assignment.get(self._var_key(variable), -1)
            if claim == -1 and self._var_key(variable) not in self._trainable_variables_indices:
                raise VariableAssignmentError(
                    f"CaseOptimizer: variable {getattr(variable, 'path', variable)!r} was not among the variables "
                    f"this optimizer was built on. Fix: build it on all trainable variables (model.compile does)."
                )
            if claim >= 0 and grad is not None:
                groups[claim][0].append(grad)
                groups[claim][1].append(variable)
        for optimizer, (group_grads, group_variables) in zip(self._optimizers, groups):
            if group_variables:
                optimizer.apply(group_grads, group_variables)
        self._iterations.assign_add(1)

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:  # pragma: no cover
        raise NotImplementedError("CaseOptimizer dispatches in apply(); update_step is never called.")

    def finalize_variable_values(self, var_list: Any) -> None:
        for optimizer in self._optimizers:
            optimizer.finalize_variable_values(
                [v for v in var_list if self._assignment.get(self._var_key(v)) == self._optimizers.index(optimizer)]
            )

    def get_config(self) -> dict[str, Any]:
        predicates = []
        for index, predicate in enumerate(self._predicates):
            if predicate is not None and _serializable_predicate(predicate):
                predicates.append(keras.saving.serialize_keras_object(predicate))
            elif self.built or self._saved_assignment is not None:
                predicates.append(None)  # the saved assignment stands in for it
            else:
                raise ParameterError(
                    f"CaseOptimizer: cannot save predicate {index} ({predicate!r}): Keras cannot find it again by "
                    f"name, and the optimizer is not built yet, so there is no assignment to save instead. Fix: "
                    f"register it with keras.saving.register_keras_serializable (or define it at module level), or "
                    f"save after building the optimizer (model.compile on a built model, or one training step)."
                )
        pairs = len(self._predicates)
        return {
            "name": self.name,
            "predicates": predicates,
            "optimizers": [keras.saving.serialize_keras_object(o) for o in self._optimizers[:pairs]],
            "default_optimizer": keras.saving.serialize_keras_object(self.default_optimizer),
            "assignment": [list(item) for item in (self._paths if self.built else self._saved_assignment or [])],
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> CaseOptimizer:
        def load(item: Any) -> Any:
            return None if item is None else keras.saving.deserialize_keras_object(item, custom_objects=custom_objects)

        _check_config(config)
        pairs = tuple((load(p), load(o)) for p, o in zip(config["predicates"], config["optimizers"]))
        return cls(
            *pairs,
            default_optimizer=load(config.get("default_optimizer")),
            name=config.get("name", "case_optimizer"),
            assignment=config.get("assignment"),
        )


def _damaged(what: str) -> ParameterError:
    return ParameterError(
        f"CaseOptimizer: the saved config is damaged: {what}. It is what CaseOptimizer.get_config() writes (keys "
        f"'predicates' and 'optimizers', lists of equal length, 'default_optimizer', 'assignment'). Fix: save the "
        f"model again with ste, or repair the optimizer's config in the .keras file's config.json."
    )


def _check_config(config: Any) -> None:
    """Refuse a config that ``get_config`` cannot have written (missing keys, wrong types, unequal lengths)."""
    if not isinstance(config, dict):
        raise _damaged(f"expected a dict, received {type(config).__name__}")
    missing = [key for key in ("predicates", "optimizers") if key not in config]
    if missing:
        raise _damaged(f"missing key(s) {missing}")
    predicates, optimizers = config["predicates"], config["optimizers"]
    if not isinstance(predicates, list) or not isinstance(optimizers, list):
        raise _damaged(
            f"'predicates' and 'optimizers' must be lists; received {type(predicates).__name__} and "
            f"{type(optimizers).__name__}"
        )
    if len(predicates) != len(optimizers) or not optimizers:
        raise _damaged(f"{len(predicates)} predicate(s) for {len(optimizers)} optimizer(s)")
    for key in ("optimizers", "predicates"):
        for index, item in enumerate(config[key]):
            if item is not None and not isinstance(item, (dict, str)):
                raise _damaged(f"{key}[{index}] is {type(item).__name__} {item!r:.60}, not a serialized object")
    if config.get("default_optimizer") is not None and not isinstance(config["default_optimizer"], (dict, str)):
        raise _damaged(f"'default_optimizer' is {type(config['default_optimizer']).__name__}")
    if config.get("name") is not None and not isinstance(config["name"], str):
        raise _damaged(f"'name' is {type(config['name']).__name__} {config['name']!r:.60}, not a string")


def _checked_assignment(assignment: Any, count: int) -> list[tuple[str, int | None]]:
    """A saved assignment as ``[(path, claim)]``: claim an optimizer index in [0, count) or None (not trained)."""
    if not isinstance(assignment, (list, tuple)):
        raise VariableAssignmentError(
            f"CaseOptimizer: assignment must be a list of [variable path, optimizer index] pairs; received "
            f"{type(assignment).__name__} {assignment!r:.80}. Fix: load a config written by CaseOptimizer.get_config()."
        )
    checked: list[tuple[str, int | None]] = []
    for item in assignment:
        ok = isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
        claim = item[1] if ok else None
        if ok and claim is not None:
            ok = isinstance(claim, int) and not isinstance(claim, bool) and 0 <= claim < count
        if not ok:
            raise VariableAssignmentError(
                f"CaseOptimizer: the saved assignment entry {item!r:.80} is not [variable path, optimizer index] "
                f"with an index from 0 to {count - 1} (or null for a variable no optimizer trains): that variable "
                f"would never train. Fix: save the model again with ste, or correct the index in the .keras file."
            )
        checked.append((item[0], claim))
    return checked
