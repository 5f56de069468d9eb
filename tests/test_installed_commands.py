"""The package as a user installs it: a wheel built from this checkout, installed (not editable)
into a fresh virtual environment; every command of setup.cfg's console entry points answers --help
there, and the installed train, translate and evaluate commands run a tiny round trip from a folder
outside the clone.

The fresh environment sees the test environment's site-packages through a .pth file (added after the
wheel is installed, so that pip sees an empty environment): torch and transformers are not installed
again."""

import configparser
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from nmt_toolkit.quickstart_corpus import generate_pairs

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS = configparser.ConfigParser()
ENTRY_POINTS.read(ROOT / "setup.cfg")
COMMANDS = dict(
    line.replace(" ", "").split("=")
    for line in ENTRY_POINTS["options.entry_points"]["console_scripts"].strip().splitlines()
)
PACKAGE_FILES = ("setup.cfg", "pyproject.toml", "README.md", "modeling_dwlstm", "nmt_toolkit")
TINY_MODEL = {
    "model_type": "dwlstm",
    "d_model": 16,
    "ffn_dim": 32,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "max_position_embeddings": 64,
}


def test_every_script_is_a_command():
    modules = {target.split(":")[0].rsplit(".", 1)[1] for target in COMMANDS.values()}
    assert modules == {path.stem for path in (ROOT / "scripts").glob("*.py")}
    assert all(name.startswith("dwlstm-") for name in COMMANDS)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The bin folder of a fresh venv holding the wheel of this checkout."""
    work = tmp_path_factory.mktemp("installed")
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", *PACKAGE_FILES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in tracked:  # a copy: building writes build/ and *.egg-info beside the sources
        if (ROOT / name).is_file():
            (work / "source" / name).parent.mkdir(parents=True, exist_ok=True)
            (work / "source" / name).write_bytes((ROOT / name).read_bytes())
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run(
        [
            *pip,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            work / "dist",
            work / "source",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", work / "venv"], check=True)
    python = work / "venv" / "bin" / "python"
    (wheel,) = (work / "dist").glob("modeling_dwlstm-*.whl")
    subprocess.run(
        [*pip, "--python", python, "install", "--no-deps", wheel], check=True, capture_output=True
    )
    (site,) = (work / "venv" / "lib").glob("python*/site-packages")
    (site / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return work / "venv" / "bin"


def run(
    bin_folder: Path, command: str, *argv, cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment.update(
        PATH=f"{bin_folder}{os.pathsep}{environment['PATH']}",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
    )
    finished = subprocess.run(
        [command, *map(str, argv)],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert finished.returncode == 0, f"{command}: {finished.stderr[-3000:]}"
    # what optional backends log at import (modeling_dwlstm/_import_noise.py) stays out of a
    # command's output
    assert "Failed to load" not in finished.stderr and "Enum subclass" not in finished.stderr, (
        finished.stderr
    )
    return finished


def test_every_installed_command_answers_help(installed, tmp_path):
    assert sorted(path.name for path in installed.glob("dwlstm-*")) == sorted(COMMANDS)
    # One process calls each installed entry point with --help (a process per command would take
    # minutes).
    check = """
import sys
from importlib.metadata import entry_points
import nmt_toolkit
assert nmt_toolkit.__file__.startswith(sys.prefix), nmt_toolkit.__file__  # the wheel's copy, not the clone
names = sorted({point.name for point in entry_points(group="console_scripts") if point.name.startswith("dwlstm-")})
for name in names:
    (point,) = {point for point in entry_points(group="console_scripts", name=name)}
    sys.argv = [name, "--help"]
    try:
        point.load()()
    except SystemExit as exit:
        assert exit.code in (0, None), (name, exit.code)
    print("checked", name)
"""  # noqa: E501
    finished = run(installed, "python", "-c", check, cwd=tmp_path)
    assert [
        line.split()[1] for line in finished.stdout.splitlines() if line.startswith("checked")
    ] == sorted(COMMANDS)
    assert "--json_lines" in finished.stdout and "--overwrite_output_dir" in finished.stdout


def test_train_translate_evaluate_round_trip_outside_the_clone(installed, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    pairs = generate_pairs(220, seed=5)
    for split, part in (("train", pairs[:200]), ("test", pairs[200:])):
        for index, language in enumerate(("en", "de")):
            (data / f"{split}.{language}").write_text(
                "".join(pair[index] + "\n" for pair in part), encoding="utf-8"
            )
    (tmp_path / "tiny.json").write_text(json.dumps(TINY_MODEL))
    languages = ["--source_lang", "en", "--target_lang", "de"]
    run(
        installed,
        "dwlstm-train-tokenizer",
        "--dataset",
        "data",
        *languages,
        "--merges",
        "150",
        "--output_dir",
        "tok",
        cwd=tmp_path,
    )
    run(
        installed,
        "dwlstm-train",
        "--model_name_or_path",
        "tiny.json",
        "--tokenizer_name_or_path",
        "tok",
        "--dataset",
        "data",
        *languages,
        "--max_steps",
        "3",
        "--warmup_steps",
        "1",
        "--max_tokens",
        "400",
        "--save_steps",
        "3",
        "--use_cpu",
        "--disable_tqdm",
        "true",
        "--report_to",
        "none",
        "--output_dir",
        "run",
        cwd=tmp_path,
    )
    decoding = ["--num_beams", "2", "--max_new_tokens", "5"]
    piped = run(
        installed,
        "dwlstm-translate",
        "--model",
        "run",
        *decoding,
        cwd=tmp_path,
        stdin="A man rides a horse.\n",
    )
    assert len(piped.stdout.splitlines()) == 1 and piped.stdout.endswith("\n")
    run(
        installed,
        "dwlstm-translate",
        "--model",
        "run",
        "--input",
        "data/test.en",
        "--output",
        "test.hyp",
        *decoding,
        cwd=tmp_path,
    )
    run(
        installed,
        "dwlstm-evaluate",
        "--model",
        "run",
        "--data",
        "data",
        "--split",
        "test",
        *languages,
        *decoding,
        "--output_dir",
        "eval",
        cwd=tmp_path,
    )
    hypotheses = (tmp_path / "eval" / "hypotheses.txt").read_text(encoding="utf-8")
    assert (tmp_path / "test.hyp").read_text(encoding="utf-8") == hypotheses and len(
        hypotheses.splitlines()
    ) == 20
