"""Test-wide set-up: quiet TensorFlow, four logical CPU devices (for distribution tests), hypothesis profiles."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf
from hypothesis import HealthCheck, settings

# Logical devices must be configured before TensorFlow runs its first op, so it happens here, once per session.
_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(4)]  # 2 and 4 replicas on one host
    )
except RuntimeError:  # already initialised (e.g. a plugin ran an op first)
    pass

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))  # HYPOTHESIS_PROFILE=dev for a longer run
