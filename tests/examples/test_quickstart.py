"""examples/quickstart.py: each printed gradient agrees with its printed numpy reference, digit for digit."""

from __future__ import annotations

import itertools
import runpy
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


def test_printed_gradients_equal_their_references(capsys):
    runpy.run_path(str(SCRIPT), run_name="quickstart")
    lines = capsys.readouterr().out.splitlines()
    titles = [
        line for before, line in itertools.pairwise(lines) if before == "" and line.startswith(("1", "2", "3", "sign"))
    ]
    gradients = [line.split(":", 1)[1].strip() for line in lines if line.startswith("  gradient:")]
    references = [line.split(":", 1)[1].strip() for line in lines if line.startswith("  numpy:")]
    assert len(titles) == len(gradients) == len(references) == 5
    assert gradients == references, "\n".join(f"{g}\n{r}" for g, r in zip(gradients, references))
    # the sigmoid_surrogate(beta=4) row against the closed form 4·e^(−4x)/(1 + e^(−4x))² in float64
    x = np.array([-3.0, -1.0, -0.25, 0.0, 0.25, 1.0, 3.0])
    closed = 4 * np.exp(-4 * np.abs(x)) / (1 + np.exp(-4 * np.abs(x))) ** 2
    index = next(i for i, title in enumerate(titles) if "beta=4" in title)
    assert references[index] == np.array2string(closed, precision=3)
    assert lines[-1] == "All gradients match their numpy references."
