"""python -m ste: list, show, plot, check; errors on stderr with a non-zero exit status."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

import ste
from ste._tools._cli import main
from tests.helpers import run_python, without_tensorflow


def test_list_shows_every_entry_with_its_defaults(capsys):
    assert main(["list"]) == 0
    surrogates, _quantizers = capsys.readouterr().out.split("\n\n")
    rows = {line.split()[0]: line for line in surrogates.splitlines()[1:]}
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


# --- the process `python -m ste`: answers without TensorFlow, one-line errors, user modules ---------------------

ROOT = Path(__file__).resolve().parents[1]

#: What TensorFlow itself writes to stderr when it is imported and runs (native log lines, whatever
#: TF_CPP_MIN_LOG_LEVEL says for the ones before its logging starts): ``python -m ste`` runs ``import ste``, which
#: imports TensorFlow before the command line can do anything.
_TENSORFLOW_LOG = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IWEF]\d{4} [\d:.]+\s+\d+ \w+\.cc:\d+\] "
    r"|To enable the following instructions: "
)


def _ste_lines(stderr):
    """The lines of ``stderr`` that are not TensorFlow's own log lines."""
    return [line for line in stderr.splitlines() if not _TENSORFLOW_LOG.match(line)]


def _run(tmp_path, *args, timeout=60):
    """``python -m ste ARGS`` in a fresh process with this checkout's ste and no TensorFlow (as if it were not
    installed); (status, stdout, stderr lines, the top-level modules it imported)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ste", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=without_tensorflow(tmp_path),
        cwd=tmp_path,
    )
    lines = done.stderr.splitlines()
    imported = {line.split("|")[-1].strip().split(".")[0] for line in lines if line.startswith("import time:")}
    other = [line for line in lines if not line.startswith("import time:")]
    return done.returncode, done.stdout, other, imported


def test_help_answers_without_tensorflow(tmp_path):
    status, out, err, imported = _run(tmp_path, "--help")
    assert status == 0 and err == []
    assert "usage: ste" in out and "--import MODULE" in out
    assert "ste" in imported and not {"keras", "numpy"} & imported


@pytest.mark.parametrize("args", [["list"], ["show", "atan"]])
def test_list_and_show_answer_without_importing_tensorflow_where_it_is_installed(args, capsys):
    """With TensorFlow installed, ``python -m ste list`` and ``show NAME`` answer from the catalog without importing
    TensorFlow or Keras (``-X importtime`` lists every module imported), and print what the live registry prints in
    this process. A command that needs the registry (``show`` of a spec string) imports them and answers as well."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = run_python(["-X", "importtime", "-m", "ste", *args], ROOT, env=env, timeout=300)
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "ste" in imported and not {"tensorflow", "keras"} & imported
    assert main(args) == 0
    assert done.stdout == capsys.readouterr().out
    live = run_python(["-X", "importtime", "-m", "ste", "show", "atan(alpha=3)"], ROOT, env=env, timeout=300)
    assert re.search(r"\|\s+tensorflow$", live.stderr, re.M) and live.stdout.startswith("atan(alpha=3")


REGENERATE = 'python -c "from ste._tools._cli import write_catalog; write_catalog()"'


def test_the_static_catalog_is_what_the_live_registry_prints():
    """``list`` and ``show NAME`` of built-in names answer from ste/_tools/cli_catalog.json without TensorFlow: it must
    be exactly what the commands print with the registry loaded, for every built-in surrogate and quantizer name."""
    from ste._tools._cli import CATALOG, render_catalog

    catalog = json.loads(CATALOG.read_text(encoding="utf-8"))
    listing, shows = render_catalog()
    assert set(shows) == set(ste.registry.names()) | set(ste.quantizers.names())
    assert catalog["list"] == listing, f"ste/_tools/cli_catalog.json is out of date: {REGENERATE}"
    assert set(catalog["show"]) == set(shows), f"ste/_tools/cli_catalog.json is out of date: {REGENERATE}"
    for name, text in shows.items():
        assert catalog["show"][name] == text, f"show {name}: ste/_tools/cli_catalog.json is out of date: {REGENERATE}"


@pytest.mark.parametrize("args", [["list"], ["show", "atan"], ["show", "ste_sign"], ["show", "approx_sign"]])
def test_list_and_show_of_built_ins_answer_without_tensorflow(args, capsys, tmp_path):
    status, out, err, imported = _run(tmp_path, *args)
    assert status == 0 and err == []
    assert "ste" in imported and "keras" not in imported
    assert main(args) == 0
    assert out == capsys.readouterr().out  # what the live registry prints


def test_a_spec_string_an_import_or_a_loaded_registry_answer_from_the_registry(monkeypatch):
    from ste._tools._cli import _parse, _static_answer

    assert _static_answer(_parse(["list"])) is None  # this process loaded the registry: it may hold more entries
    monkeypatch.delitem(sys.modules, "ste.registry")  # as in `python -m ste`, where it is not loaded
    assert _static_answer(_parse(["list"])) is not None
    assert _static_answer(_parse(["show", "atan(alpha=4)"])) is None  # computed: the peak depends on alpha
    assert _static_answer(_parse(["--import", "my_rules", "list"])) is None  # the user's entries are listed too
    assert _static_answer(_parse(["show", "atan", "--import", "my_rules"])) is None
    assert _static_answer(_parse(["show", "no_such_rule"])) is None  # the live registry's error and suggestions


def test_console_script_answers_help_without_tensorflow(tmp_path):
    launcher = tmp_path / "ste"  # what pip writes for [project.scripts] ste = "ste.__main__:main"
    launcher.write_text(
        "import re\nimport sys\nfrom ste.__main__ import main\nif __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(main())\n"
    )
    env = without_tensorflow(tmp_path)
    for args, status, stream in ((["--help"], 0, "stdout"), (["check", "atan", "--points", "0"], 2, "stderr")):
        done = subprocess.run(
            [sys.executable, str(launcher), *args], capture_output=True, text=True, timeout=30, env=env
        )
        assert done.returncode == status
        assert getattr(done, stream).startswith("usage: ste" if status == 0 else "ste check: error: argument --points")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["check", "atan", "--points", "-5"], "--points: expected an integer from 2 to 1000000; received -5"),
        (["check", "atan", "--points", "many"], "--points: expected an integer from 2 to 1000000"),
        (["check", "atan", "--points", "99999999999999999999"], "from 2 to 1000000; received 99999999999999999999"),
        (["check", "atan", "--points", "3000000000"], "from 2 to 1000000; received 3000000000"),
        (["plot", "atan", "-o", "a.png", "--points", "1000001"], "from 2 to 1000000; received 1000001"),
        (["check", "atan", "--points", "9" * 5000], "from 2 to 1000000; received '999"),  # beyond int()'s digits
        (["check", "atan", "--range", "-1" + "0" * 308, "1e308"], "--range needs a finite width HIGH - LOW"),
        (["check", "atan", "--range", "nan", "1"], "--range: expected two finite numbers"),
        (["plot", "atan", "--range", "-1", "inf", "-o", "a.png"], "--range: expected two finite numbers"),
        (["check", "atan", "--range", "2", "-2"], "--range needs LOW < HIGH"),
        (["plot", "atan", "-o", "plot.txt"], "unknown image type .txt"),
        (["plot", "atan", "-o", "plot"], "unknown image type (no extension)"),
        (["plot", "atan", "-o", "no-such-dir/plot.png"], "does not exist"),
        (["plot", "atan"], "required: -o/--output"),
        ([], "required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_usage_errors_exit_2_with_one_line_without_tensorflow(args, needle, tmp_path):
    status, out, err, imported = _run(tmp_path, *args)
    assert status == 2 and out == ""
    assert len(err) == 1 and err[0].startswith("ste") and ": error: " in err[0], err
    assert needle in err[0]
    assert "keras" not in imported


def test_a_command_imports_the_users_module_and_adds_nothing_to_tensorflows_log(tmp_path):
    (tmp_path / "my_rules_cli.py").write_text(
        "import tensorflow as tf\nimport ste\n\n"
        "@ste.registry.register('cli_user_rule')\n"
        "def cli_user_rule(x, k=3.0):\n"
        "    return k * tf.ones_like(x)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # the module is found from the current directory, as `python -m` users expect
    shown, checked = (
        run_python(["-m", "ste", "--import", "my_rules_cli", command, "cli_user_rule"], tmp_path, env=env, timeout=180)
        for command in ("show", "check")
    )
    assert shown.stdout.splitlines()[0] == "cli_user_rule(k=3.0)"
    assert "peak:       3 everywhere" in shown.stdout  # k·1
    assert _ste_lines(shown.stderr) == []  # TensorFlow's own lines only (oneDNN, CUDA, cpu_feature_guard)
    # float16 kernels log an oneDNN line at error level on CPUs without AVX-512 FP16, one of TensorFlow's own
    assert "finite at 0" in checked.stdout, checked.stderr
    assert _ste_lines(checked.stderr) == []


def test_import_option_in_process_by_module_and_by_path_and_after_the_command(tmp_path, monkeypatch, capsys):
    (tmp_path / "cli_rules_a.py").write_text(
        "import tensorflow as tf\nimport ste\nste.registry.register('cli_rule_a', lambda x: 2.0 * tf.ones_like(x))\n"
    )
    (tmp_path / "cli_rules_b.py").write_text(
        "import tensorflow as tf\nimport ste\nste.registry.register('cli_rule_b', lambda x: 5.0 * tf.ones_like(x))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["--import", "cli_rules_a", "--import", str(tmp_path / "cli_rules_b.py"), "list"]) == 0
        names = {line.split()[0] for line in capsys.readouterr().out.split("\n\n")[0].splitlines()[1:]}
        assert {"cli_rule_a", "cli_rule_b"} <= names
        assert main(["show", "cli_rule_b", "--import", str(tmp_path / "cli_rules_b.py")]) == 0
        assert "peak:       5 everywhere" in capsys.readouterr().out
    finally:
        for name in ("cli_rule_a", "cli_rule_b"):
            if name in ste.registry.names():
                ste.registry.unregister(name)
        sys.modules.pop("cli_rules_a", None)
        sys.modules.pop("cli_rules_b", None)


def test_import_failures_are_one_line_usage_errors(capsys):
    assert main(["--import", "no_such_module_for_ste", "list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ModuleNotFoundError" in err and "no_such_module_for_ste" in err
    assert main(["--import", "missing_file.py", "list"]) == 2
    assert "missing_file.py" in capsys.readouterr().err


def test_unknown_name_suggests_import_not_registration(capsys):
    assert main(["show", "my_own_rule"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--import MODULE" in err and "Register your own" not in err
    assert main(["--import", "json", "show", "sigmoid_surogate"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'sigmoid_surrogate'" in err and "(imported so far: json)" in err


def test_every_image_type_offered_is_one_matplotlib_writes():
    pytest.importorskip("matplotlib")
    from matplotlib.backend_bases import FigureCanvasBase

    from ste._tools._cli import IMAGE_TYPES

    assert set(IMAGE_TYPES) <= set(FigureCanvasBase.get_supported_filetypes())


def test_plot_of_a_quantizer_name_and_default_range(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "ste_sign.svg"
    assert main(["plot", "ste_sign", "-o", str(path), "--points", "51"]) == 0
    assert path.read_text().lstrip().startswith("<?xml") and "SteSign" in path.read_text()


def test_check_takes_a_quantizer_name(capsys):
    assert main(["check", "ste_sign(clip_value=2.0)", "--points", "101"]) == 0
    out = capsys.readouterr().out
    assert out.count("ok ") == 2 and "SteSign(clip_value=2.0)" in out
    assert main(["check", "dorefa(bits=2)", "--points", "51"]) == 0  # no surrogate: its reference clip(x, 0, 1)
    assert capsys.readouterr().out.count("ok ") == 2


def test_check_passes_magnitude_aware_sign(capsys):
    """The reference holds α (mean(abs(x))) fixed, as the gradient does."""
    assert main(["check", "magnitude_aware_sign", "--points", "201"]) == 0
    out = capsys.readouterr().out
    assert out.count("ok ") == 2 and "MagnitudeAwareSign" in out


# --- quantizer names: list, show and check take them as plot does ----------------------------------------------


def test_list_shows_every_quantizer_with_its_surrogate(capsys):
    assert main(["list"]) == 0
    quantizers = capsys.readouterr().out.split("\n\n")[1].splitlines()
    assert quantizers[0].split()[0] == "quantizer"
    rows = {line.split()[0]: line.split()[1:] for line in quantizers[1:]}
    # a name that is a surrogate's too (approx_sign, swish_sign) means the surrogate, listed in the first table
    assert set(rows) == set(ste.quantizers.names()) - set(ste.registry.names())
    assert rows["ste_sign"] == ["ste.larq.quantizers.SteSign", "straight_through(clip=1.0)"]  # larq: clip_value=1.0
    assert rows["sign"][0] == "ste.quantizers.Sign"


def test_show_takes_a_quantizer_name(capsys):
    assert main(["show", "ste_sign(clip_value=0.5)"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "SteSign(clip_value=0.5)"
    assert "surrogate:  straight_through(clip=0.5)" in out
    assert "peak:       1 for x in [-0.5, 0.5]" in out  # 1[abs(x) <= 0.5]
    assert main(["show", "dorefa"]) == 0  # no surrogate: its own gradient, told by its docstring
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "DoReFa(bits=2, mode='activations')" and "Zhou et al. 2016" in out
    assert "d(x):" not in out


@pytest.mark.parametrize("name", sorted(set(ste.registry.names()) | set(ste.quantizers.names())))
def test_show_prints_no_restructuredtext_markup(name, capsys):
    assert main(["show", name]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and ":func:" not in out and ":class:" not in out, out


@pytest.mark.parametrize("name", ["lsq", "pact(bits=2)"])
def test_check_of_a_quantizer_with_variables_says_why_in_one_line(name, capsys):
    assert main(["check", name]) == 3  # neither a usage error (2) nor a failed check (1)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("ste check: cannot check ")
    assert "reads variables" in captured.err and "ste.testing.check_gradient" in captured.err


def test_exit_statuses_are_documented():
    text = (ROOT / "docs" / "tools.md").read_text()
    assert "exit status 2" in text and "exits with status 1" in text and "exits with status 3" in text


def test_the_points_bound_is_inclusive_and_in_the_help(capsys):
    from ste._tools._cli import MAX_POINTS, _parse

    assert _parse(["check", "atan", "--points", str(MAX_POINTS)]).points == MAX_POINTS
    assert _parse(["plot", "atan", "-o", "a.png", "--points", "2"]).points == 2
    for command in (["check", "--help"], ["plot", "--help"]):
        assert main(command) == 0
        assert f"grid points, 2 to {MAX_POINTS}" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    "args",
    [
        ["check", "atan", "--points", "99999999999999999999"],
        ["check", "atan", "--points", "3000000000"],
        ["check", "atan", "--points", "1"],
        ["check", "atan", "--points", "-5"],
        ["check", "atan", "--points", "abc"],
        ["check", "atan", "--range", "0", "inf"],
        ["check", "atan", "--range", "1", "1"],
        ["check", "atan(alpha=__import__('os'))"],
        ["check", "no_such_surrogate"],
        ["plot", "atan", "--points", "99999999999999999999", "-o", "x.png"],
        ["show", ""],
    ],
)
def test_bad_arguments_are_one_line_usage_errors(args, capsys):
    """Arguments argparse accepts but the registry refuses (a spec with code, an unknown or empty name) too."""
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(f"ste {args[0]}: error: "), captured.err
