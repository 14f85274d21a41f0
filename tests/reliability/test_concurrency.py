"""8 threads registering, looking up and using surrogates at once lose nothing and raise nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import tensorflow as tf

import ste

THREADS = 8
PER_THREAD = 20


def _run_together(work: Callable[[int], None]) -> list[BaseException]:
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def target(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            work(index)
        except BaseException as error:  # every failure counts, assertion errors included
            errors.append(error)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return errors


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    registered: list[str] = []
    yield registered
    for name in registered:
        if name in ste.registry.names():
            ste.registry.unregister(name)


def test_concurrent_registration_and_lookup(cleanup: list[str]) -> None:
    builtins = ste.registry.names()
    expected = [f"rel_thread{t}_{i}" for t in range(THREADS) for i in range(PER_THREAD)]
    cleanup.extend([*expected, "rel_shared"])
    seen_counts: list[int] = []

    def work(t: int) -> None:
        for i in range(PER_THREAD):
            name = f"rel_thread{t}_{i}"
            scale = float(t * PER_THREAD + i + 1)
            if i % 2:

                def derivative(x: tf.Tensor, k: float = scale) -> tf.Tensor:
                    return k * tf.ones_like(x)

                ste.registry.register(name, derivative)
            else:

                class Scaled(ste.registry.Surrogate):
                    k: float = scale

                    def derivative(self, x: tf.Tensor) -> tf.Tensor:
                        return self.param("k", x.dtype) * tf.ones_like(x)

                ste.registry.register(name, Scaled)
            # everyone replaces the same shared name, and reads the others' entries and the built-ins
            ste.registry.register("rel_shared", lambda x, k=scale: k * tf.ones_like(x), replace=True)
            assert ste.registry.get(name).params == {"k": scale}
            assert ste.registry.get(f"{name}(k=2.5)").params == {"k": 2.5}
            other = f"rel_thread{(t + 1) % THREADS}_{i}"
            if other in ste.registry.names():
                assert ste.registry.lookup(other).name == other
            for builtin in builtins:
                ste.registry.get(builtin)
            seen_counts.append(len(ste.registry.names()))

    errors = _run_together(work)
    assert errors == [], errors[:3]
    names = set(ste.registry.names())
    assert set(expected) <= names, sorted(set(expected) - names)[:5]
    assert set(builtins) <= names
    assert ste.registry.lookup("rel_shared").name == "rel_shared"
    # every entry still computes its own derivative
    x = tf.constant([0.5, -2.0])
    for t in range(THREADS):
        for i in range(PER_THREAD):
            value = ste.registry.get(f"rel_thread{t}_{i}").derivative(x).numpy()
            np.testing.assert_array_equal(value, [t * PER_THREAD + i + 1] * 2)
    assert max(seen_counts) <= len(builtins) + len(expected) + 1


def test_one_op_called_from_many_threads() -> None:
    """The op's compile cache (keyed by hyperparameters) is shared; concurrent first calls must not interfere."""
    op = ste.forward(lambda x, shift=0.0: tf.sign(x - shift)).backward("sigmoid_surrogate(beta=2.0)")
    results: dict[tuple[int, int], np.ndarray] = {}

    def work(t: int) -> None:
        for i in range(5):
            shift = float((t + i) % 4) / 4.0
            x = tf.constant([-1.0, 0.3, 2.0])
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = op(x, shift=shift)
            results[(t, i)] = tape.gradient(y, x).numpy()

    errors = _run_together(work)
    assert errors == [], errors[:3]
    x = np.array([-1.0, 0.3, 2.0])
    expected = 2.0 / (4.0 * np.cosh(x) ** 2)  # beta·s·(1 − s) with beta = 2, s = sigmoid(2x)
    for value in results.values():
        np.testing.assert_allclose(value, expected, rtol=1e-6)
    assert len(results) == THREADS * 5


def test_registration_errors_from_threads_are_typed() -> None:
    ste.registry.register("rel_taken", lambda x: tf.ones_like(x))
    try:

        def work(t: int) -> None:
            with pytest.raises(ste.errors.RegistrationError, match="already registered"):
                ste.registry.register("rel_taken", lambda x: tf.zeros_like(x))

        assert _run_together(work) == []
    finally:
        ste.registry.unregister("rel_taken")
