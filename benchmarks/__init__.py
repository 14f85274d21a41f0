"""Side-by-side benchmarks of ``ste`` against hand-written TensorFlow.

Run ``python -m benchmarks.run`` from the repository root (``--smoke`` for tiny sizes). Results are written to
``benchmarks/results/`` as Markdown and JSON; ``docs/performance.md`` holds the latest full table.
"""

from ._allocator import use_bfc

use_bfc()  # before anything imports TensorFlow: the memory figures need the BFC allocator's statistics
