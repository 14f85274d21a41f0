"""The op machinery: how ``ste.forward(f).backward(rule)`` becomes a TensorFlow op with its own gradient.

* ``_dsl``: the verbs (``forward``, ``backward``, ``backward_like``) and the op they build, ``STEFunction``;
* ``_rules``: the three kinds of backward rule (a registry surrogate, a function of the upstream gradient, the
  gradient of another function) and what each keeps from the forward pass;
* ``_maskrule``, ``_bitmask``: rules that keep only a boolean mask, and the bit-packing of that mask;
* ``_compile``: where an op is compiled: one ``tf.custom_gradient`` per call, with its higher-order, forward-mode
  (``_forwardmode``) and vectorized (``_vectorized``) gradients;
* ``_gradients``, ``_inputs``: checking what a rule returns and what an op is called with;
* ``_serialization``: saving an op (Keras configs, copies, pickles) by naming its parts;
* ``_describe``, ``_xla``, ``_cpu``: how user functions are named in messages; whether code runs under XLA; which CPU
  kernels TensorFlow runs (oneDNN or its own).

Uses :mod:`ste.errors`, :mod:`ste._common` and the surrogate registry (:mod:`ste.registry`); no family, no tool.
"""
