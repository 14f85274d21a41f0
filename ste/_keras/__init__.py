"""ste inside Keras and TensorFlow: what makes ste's classes behave as Keras expects, on every supported release.

* ``_requirements``: TensorFlow and Keras checked once when ste loads (imports neither itself);
* ``_versions``: what differs between the Keras releases ste supports, read the same way on each;
* ``_lookup``: Keras's own string lookups (``keras.activations.get("ste_sign")``) find ste's names;
* ``_configs``: a damaged saved config raises an ste error instead of Keras's bare ``TypeError``;
* ``_signatures``: ``inspect.signature`` of a layer class shows its real arguments;
* ``_scopes``: TFMOT's ``*_scope(*custom_objects)`` calls, a family's classes plus the user's as custom objects;
* ``_stateless``: a wrapped layer run with some of its variables read as computed values (QAT, pruning, clustering);
* ``_forwarding``: a wrapper layer called as the layer it wraps (its call arguments, its build from every input);
* ``_matmul``: a product over an input's last axes as one 2-D matmul, which TFLite fuses with its bias;

Nothing here imports the op machinery (:mod:`ste._core`) or a family. Saving an op lives with the op
(``ste._core._serialization``); the patches of Keras and TensorFlow are listed in ``ste._patches``.
"""
