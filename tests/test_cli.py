"""python -m ste: list, show, plot, check; errors on stderr with a non-zero exit status."""

from __future__ import annotations

import runpy
import sys

import pytest
import tensorflow as tf

import ste
from ste._cli import main


def test_list_shows_every_entry_with_its_defaults(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert set(rows) == set(ste.registry.names())
    assert "clip=1.0" in rows["straight_through"]
    assert "beta=1.0" in rows["sigmoid_surrogate"]


def test_show_gives_formula_defaults_peak_and_reference(capsys):
    assert main(["show", "sigmoid_surrogate(beta=4.0)"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "sigmoid_surrogate(beta=4.0)"
    assert "peak:       1 at x = 0" in out  # beta / 4
    assert "reference:" in out and "Zenke" in out
    assert main(["show", "straight_through"]) == 0
    assert "peak:       1 for x in [-1, 1]" in capsys.readouterr().out


def test_unknown_name_goes_to_stderr_with_suggestions(capsys):
    assert main(["show", "sigmoid_surogate"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "did you mean 'sigmoid_surrogate'" in captured.err


def test_plot_writes_the_file(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "atan.png"
    assert main(["plot", "sigmoid_surrogate(beta=2)", "-o", str(path), "--range", "-2", "2"]) == 0
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert main(["plot", "identity", "-o", str(tmp_path / "missing-dir" / "x.png")]) == 2
    assert "error" in capsys.readouterr().err


def test_check_passes_for_a_correct_entry_and_fails_for_a_wrong_one(capsys):
    assert main(["check", "sigmoid_surrogate(beta=4)", "--points", "201"]) == 0
    assert capsys.readouterr().out.count("ok ") == 2

    def derivative(x, k=1.0):  # claims tanh', but the primitive below is k·x: wrong
        return 1.0 - tf.tanh(x) ** 2

    ste.registry.register("cli_wrong", derivative, primitive=lambda x, k=1.0: k * x)
    try:
        assert main(["check", "cli_wrong(k=2.0)", "--points", "101"]) == 1
        assert "FAIL" in capsys.readouterr().err
    finally:
        ste.registry.unregister("cli_wrong")
    assert main(["check", "sigmoid_surrogate(beta=-1)"]) == 2
    assert "beta" in capsys.readouterr().err


def test_module_entry_point(monkeypatch, capsys):
    """``python -m ste`` runs ste/__main__.py as __main__ (run in this process: a fresh TensorFlow import is slow)."""
    monkeypatch.setattr(sys, "argv", ["ste", "show", "straight_thru"])
    with pytest.raises(SystemExit) as caught:
        runpy.run_module("ste", run_name="__main__", alter_sys=True)
    assert caught.value.code == 2
    captured = capsys.readouterr()
    assert "did you mean 'straight_through'" in captured.err
    assert captured.out == ""


def test_entry_with_a_required_parameter_is_listed_without_a_peak(capsys):
    def needs_k(x, k):
        return k * tf.ones_like(x)

    ste.registry.register("cli_needs_k", needs_k)
    try:
        assert main(["list"]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("cli_needs_k"))
        assert row.split()[1] == "k"
        assert main(["show", "cli_needs_k"]) == 0
        assert "peak:       - (needs parameters)" in capsys.readouterr().out
        assert main(["show", "cli_needs_k(k=3.0)"]) == 0
        assert "peak:       3 everywhere" in capsys.readouterr().out
    finally:
        ste.registry.unregister("cli_needs_k")
