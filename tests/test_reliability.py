"""Nothing silent: each class of silent wrong result, lost data or unclear error, with its exact outcome."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import MULTI30K
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, pipeline

from modeling_dwlstm import DwLstmConfig
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.checkpoints import (
    average_checkpoints,
    load_saved_model,
    load_saved_tokenizer,
    save_pretrained_atomically,
)
from nmt_toolkit.data import load_parallel_corpus, train_corpus_tokenizer
from nmt_toolkit.evaluation import EvaluationArguments, run_evaluation, translate_sentences
from nmt_toolkit.files import (
    CHECKSUMS_NAME,
    atomic_directory,
    atomic_write_text,
    check_local_or_hub,
    prepare_output_dir,
    read_lines,
    split_lines,
    verify_checksums,
    write_checksums,
)
from nmt_toolkit.training import (
    DataArguments,
    ModelArguments,
    TokenBatchSeq2SeqTrainer,
    TrainingDiverged,
    TranslationTrainingArguments,
    apply_config_overrides,
    train_translation,
)

REPOSITORY = Path(__file__).resolve().parents[1]
SENTENCES = ["a man rides a horse .", "ein mann reitet ein pferd .", "two dogs play .", "zwei hunde spielen ."] * 5
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny saved model folder (weights, config, tokenizer, checksum manifest) and its tokenizer."""
    folder = tmp_path_factory.mktemp("saved") / "model"
    tokenizer = train_joint_bpe_tokenizer(SENTENCES, vocab_size=60)
    config = DwLstmConfig(**tokenizer_model_kwargs(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=2, ffn_dim=16, max_position_embeddings=12)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_checksums(folder)
    return folder, model, tokenizer


def copy_of(folder: Path, destination: Path) -> Path:
    return Path(shutil.copytree(folder, destination))


# --- One line-splitting rule ----------------------------------------------------------------------------------

@pytest.mark.parametrize("inside", ["\u2028", "\u2029", "\u0085", "\x0c", "\x0b", "\x1c", "\x1d", "\x1e", "\r"])
def test_characters_that_splitlines_breaks_on_stay_inside_a_line_everywhere(inside, tmp_path):
    text = f"one{inside}sentence\nsecond\r\nthird\n"
    assert split_lines(text) == [f"one{inside}sentence", "second", "third"]
    for language in ("en", "de"):
        (tmp_path / f"test.{language}").write_bytes(text.encode("utf-8"))
    assert read_lines(tmp_path / "test.en") == split_lines(text)
    corpus = load_parallel_corpus(tmp_path, "en", "de", "test")["translation"]  # the training reader: same lines
    assert [pair["en"] for pair in corpus] == split_lines(text)


def test_evaluation_keeps_sources_and_references_aligned_across_odd_characters(saved, tmp_path):
    folder, _, _ = saved
    (tmp_path / "src.txt").write_text("a man\u2028rides .\ntwo\x0cdogs .\n\nzwei hunde\u0085 .\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("ein mann reitet .\nzwei hunde .\n\nzwei hunde .\n", encoding="utf-8")
    results = run_evaluation(EvaluationArguments(
        model=str(folder), output_dir=str(tmp_path / "eval"), source_file=str(tmp_path / "src.txt"),
        reference_file=str(tmp_path / "ref.txt"), num_beams=1, max_new_tokens=3))
    hypotheses = read_lines(tmp_path / "eval" / "hypotheses.txt")
    assert results["sentences"] == 4 and len(hypotheses) == 4
    assert hypotheses[2] == "", "an empty source line gets an empty translation, in its own place"


# --- Empty input and over-long input ----------------------------------------------------------------------------

def test_empty_sources_translate_to_empty_text_without_decoding(saved, monkeypatch):
    _, model, tokenizer = saved
    calls = []
    original = model.generate
    monkeypatch.setattr(model, "generate", lambda **kwargs: calls.append(kwargs["input_ids"].shape[0]) or original(**kwargs))
    translations = translate_sentences(model, tokenizer, ["", "  ", "a man ."], num_beams=1, max_new_tokens=3)
    assert translations.hypotheses[:2] == ["", ""] and calls == [1]
    assert translate_sentences(model, tokenizer, [""], num_beams=1).hypotheses == [""] and calls == [1]


def test_pipeline_empty_text_none_and_empty_list(saved, monkeypatch):
    _, model, tokenizer = saved
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    calls = []
    original = model.generate
    monkeypatch.setattr(model, "generate", lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    assert translator("") == [{"translation_text": ""}] and not calls
    assert translator("   ", num_return_sequences=2, num_beams=2) == [{"translation_text": ""}] * 2
    mixed = translator(["", "a man .", ""], max_new_tokens=3, num_beams=1)
    assert mixed[0] == mixed[2] == {"translation_text": ""} and isinstance(mixed[1]["translation_text"], str)
    assert calls == [1]
    assert translator([]) == []
    with pytest.raises(ValueError, match="needs a text or a list of texts, got None"):
        translator(None)
    with pytest.raises(ValueError, match="item 1 is a int"):
        translator(["a", 3])


def test_a_source_longer_than_the_positions_is_refused_before_decoding_naming_its_line(saved, monkeypatch):
    _, model, tokenizer = saved
    monkeypatch.setattr(model, "generate", lambda **kwargs: pytest.fail("decoded before checking the lengths"))
    with pytest.raises(ValueError, match=r"Source line 2 has \d+ tokens, more than the model's max_position_embeddings=12"):
        translate_sentences(model, tokenizer, ["a man .", "a man rides a horse . " * 4], num_beams=1)


# --- Atomic writes, output folders ------------------------------------------------------------------------------

def test_an_interrupted_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = atomic_write_text(tmp_path / "results.json", "old")
    monkeypatch.setattr(os, "fsync", lambda descriptor: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(OSError):
        atomic_write_text(path, "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_an_interrupted_atomic_directory_leaves_nothing_and_a_replaced_one_stays_whole(tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic_directory(tmp_path / "out") as staging:
        (staging / "half").write_text("x")
        raise KeyboardInterrupt
    assert not list(tmp_path.iterdir())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old").write_text("old")
    with pytest.raises(ValueError, match="already exists"), atomic_directory(tmp_path / "out"):
        pass
    with atomic_directory(tmp_path / "out", replace=True) as staging:
        (staging / "new").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and [p.name for p in (tmp_path / "out").iterdir()] == ["new"]


def test_output_folders_are_refused_when_not_empty_and_checked_for_writability(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "hypotheses.txt").write_text("another system\n")
    with pytest.raises(ValueError, match=r"run is not empty \(holds hypotheses.txt\).*--overwrite_output_dir"):
        prepare_output_dir(tmp_path / "run")
    assert (tmp_path / "run" / "hypotheses.txt").read_text() == "another system\n"
    assert prepare_output_dir(tmp_path / "run", overwrite=True) == tmp_path / "run"
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is a file"):
        prepare_output_dir(tmp_path / "file")
    with pytest.raises(ValueError, match="Cannot write to output folder .*file/sub"):
        prepare_output_dir(tmp_path / "file" / "sub")


def test_evaluation_refuses_a_folder_with_another_systems_hypotheses_before_loading(saved, tmp_path):
    folder, _, _ = saved
    (tmp_path / "src").write_text("a man .\n")
    (tmp_path / "ref").write_text("ein mann .\n")
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "hypotheses.txt").write_text("baseline\n")
    arguments = EvaluationArguments(model=str(tmp_path / "no-such-model"), output_dir=str(tmp_path / "eval"),
                                    source_file=str(tmp_path / "src"), reference_file=str(tmp_path / "ref"))
    with pytest.raises(ValueError, match="not empty"):
        run_evaluation(arguments)
    arguments.overwrite_output_dir, arguments.baseline_hypotheses = True, str(tmp_path / "eval" / "hypotheses.txt")
    with pytest.raises(ValueError, match="is the file this evaluation writes; give another --output_dir"):
        run_evaluation(arguments)
    assert (tmp_path / "eval" / "hypotheses.txt").read_text() == "baseline\n"


# --- Checksums, damaged folders, unclear loading errors ---------------------------------------------------------

def test_flipped_bytes_in_the_weights_are_caught_by_the_manifest(saved, tmp_path):
    folder = copy_of(saved[0], tmp_path / "model")
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF  # inside a tensor: safetensors itself would load it
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model.safetensors does not match its checksum"):
        load_saved_model(folder)
    (folder / "config.json").unlink()
    with pytest.raises(ValueError, match=r"config.json is missing"):
        verify_checksums(folder)


@pytest.mark.parametrize("damage, message", [
    ("truncated", r"model.safetensors is truncated or corrupted"),
    ("empty", r"model.safetensors is truncated or corrupted"),
    ("model_type", r"model_type 'dwlstmm' is not a known model type \(this package's: dwlstm, "),
    ("d_model", r"config.json lacks d_model"),
    ("nan", r"holds NaN or infinite values: training diverged"),
])
def test_damaged_model_folders_give_one_line_errors(saved, tmp_path, damage, message):
    folder = copy_of(saved[0], tmp_path / "model")
    (folder / CHECKSUMS_NAME).unlink()  # a folder saved without a manifest: the other checks still hold
    weights, config_path = folder / "model.safetensors", folder / "config.json"
    config = json.loads(config_path.read_text())
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "empty":
        weights.write_bytes(b"")
    elif damage == "model_type":
        config_path.write_text(json.dumps({**config, "model_type": "dwlstmm"}))
    elif damage == "d_model":
        config_path.write_text(json.dumps({k: v for k, v in config.items() if k != "d_model"}))
    else:
        tensors = load_file(weights)
        first = next(iter(tensors))
        tensors[first] = torch.full_like(tensors[first], float("nan"))
        save_file(tensors, weights, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=message):
        load_saved_model(folder)


def test_paths_that_look_local_are_not_looked_up_on_the_hub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for typo in ("./my-modle", "runs/typo", str(tmp_path / "absent"), "my-modle", "a/b/c"):
        with pytest.raises(ValueError, match="no such folder"):
            check_local_or_hub(typo, "--model")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # no probe of the Hub: no network here
    check_local_or_hub("user/dwlstm-base", "--model")  # a Hub id passes on to transformers
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="config.json is a file; give the folder"):
        load_saved_model(tmp_path / "config.json")


@pytest.mark.parametrize("threads", [0, -2])
def test_threads_must_be_positive(threads, tmp_path):
    with pytest.raises(ValueError, match=f"--threads must be a positive number of CPU threads, got {threads}"):
        run_evaluation(EvaluationArguments(model="unused", output_dir=str(tmp_path / "out"), threads=threads))
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_folder_missing_files_is_named(saved, tmp_path):
    folder = copy_of(saved[0], tmp_path / "tok")
    (folder / CHECKSUMS_NAME).unlink()
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="holds no tokenizer.json: not a complete tokenizer folder"):
        load_saved_tokenizer(folder)
    save_pretrained_atomically(saved[2], tmp_path / "tok2")
    assert verify_checksums(tmp_path / "tok2") and len(load_saved_tokenizer(tmp_path / "tok2")) == len(saved[2])


def test_averaging_verifies_checksums_and_refuses_non_finite_checkpoints(saved, tmp_path):
    first, second = copy_of(saved[0], tmp_path / "checkpoint-1"), copy_of(saved[0], tmp_path / "checkpoint-2")
    later = {name: tensor + 0.5 for name, tensor in load_file(second / "model.safetensors").items()}  # another step
    save_file(later, second / "model.safetensors", metadata={"format": "pt"})
    write_checksums(second)
    averaged = average_checkpoints([first, second], tmp_path / "avg")
    assert verify_checksums(averaged)
    (second / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match=r"checkpoint-2/tokenizer.json does not match its checksum"):
        average_checkpoints([first, second], tmp_path / "avg2")
    tensors = load_file(first / "model.safetensors")
    tensors = {name: tensor * float("inf") for name, tensor in tensors.items()}
    save_file(tensors, first / "model.safetensors", metadata={"format": "pt"})
    write_checksums(first)
    with pytest.raises(ValueError, match="checkpoint-1: .* holds NaN or infinite values"):
        average_checkpoints([first], tmp_path / "avg3")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["avg", "checkpoint-1", "checkpoint-2"]


# --- Training: divergence, overwrites, resuming, full disk, arguments --------------------------------------------

@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    directory = tmp_path_factory.mktemp("setup")
    corpus = load_parallel_corpus(MULTI30K, "en", "de", max_pairs=200)
    train_corpus_tokenizer([corpus], ["en", "de"], merges=100).save_pretrained(directory / "tokenizer")
    (directory / "tiny.json").write_text(json.dumps({
        "model_type": "dwlstm", "d_model": 16, "ffn_dim": 16, "encoder_layers": 1, "decoder_layers": 1,
        "encoder_attention_heads": 2, "decoder_attention_heads": 2, "max_position_embeddings": 128}))
    return directory


def arguments(setup, output_dir, model=None, data=None, **training):
    model_args = ModelArguments(str(setup / "tiny.json"), str(setup / "tokenizer"), **(model or {}))
    data_args = DataArguments(**{"dataset": str(MULTI30K), "source_lang": "en", "target_lang": "de",
                                 "max_train_pairs": 24, "max_tokens": 160, **(data or {})})
    defaults = dict(output_dir=str(output_dir), max_steps=3, save_steps=3, warmup_steps=1, learning_rate=3e-3,
                    logging_steps=1, use_cpu=True, disable_tqdm=True, seed=0)
    return model_args, data_args, TranslationTrainingArguments(**{**defaults, **training})


def test_divergence_stops_training_at_once_naming_the_step(setup, tmp_path):
    with pytest.raises(TrainingDiverged, match=r"Training diverged at step 2: the loss is nan .*--learning_rate \(now inf\)"):
        train_translation(*arguments(setup, tmp_path, learning_rate=float("inf"), warmup_steps=0))
    assert not (tmp_path / "model.safetensors").exists() and not list(tmp_path.glob("checkpoint-*"))


def test_training_refuses_a_folder_holding_a_finished_model(setup, tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"finished model")
    with pytest.raises(ValueError, match=r"is not empty \(holds model.safetensors\).*--overwrite_output_dir"):
        train_translation(*arguments(setup, tmp_path, save_strategy="no"))
    assert (tmp_path / "model.safetensors").read_bytes() == b"finished model"
    with pytest.raises(ValueError, match="give one of them"):
        train_translation(*arguments(setup, tmp_path, overwrite_output_dir=True, resume_from_checkpoint="last"))


def test_resuming_refuses_changed_settings_and_another_model_size(setup, tmp_path):
    train_translation(*arguments(setup, tmp_path))
    checkpoint = tmp_path / "checkpoint-3"
    assert verify_checksums(checkpoint) and verify_checksums(tmp_path)
    assert "s per update: the remaining 2 updates take about" in (tmp_path / "train.log").read_text()
    with pytest.raises(ValueError, match=r"trained with max_tokens=160, learning_rate=0.003 but this command gives "
                                         r"max_tokens=200, learning_rate=0.01"):
        train_translation(*arguments(setup, tmp_path, data={"max_tokens": 200}, learning_rate=1e-2, max_steps=6,
                                     resume_from_checkpoint="last"))
    # A checkpoint without recorded arguments (an older one): the weights' shapes still tell another model size.
    (checkpoint / "run_arguments.json").unlink()
    write_checksums(checkpoint)
    with pytest.raises(ValueError, match=r"holds another model size \(\S+ is \(16,\) there, \(32,\) here\)"):
        train_translation(*arguments(setup, tmp_path, model={"config_overrides": "d_model=32,ffn_dim=32"},
                                     max_steps=6, resume_from_checkpoint="last"))
    optimizer_state = checkpoint / "optimizer.pt"
    data = bytearray(optimizer_state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    optimizer_state.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"checkpoint-3/optimizer.pt does not match its checksum"):
        train_translation(*arguments(setup, tmp_path, max_steps=6, resume_from_checkpoint="last"))


def test_a_full_disk_while_saving_says_so_and_names_the_intact_checkpoint(setup, tmp_path, monkeypatch):
    original = TokenBatchSeq2SeqTrainer._save_rng_state

    def full_at_step_4(self, output_dir):
        if self.state.global_step == 4:
            raise OSError(28, "No space left on device")
        return original(self, output_dir)

    monkeypatch.setattr(TokenBatchSeq2SeqTrainer, "_save_rng_state", full_at_step_4)
    with pytest.raises(OSError, match=r"No space left on the device while saving step 4 .*checkpoint-2 is intact"):
        train_translation(*arguments(setup, tmp_path, max_steps=4, save_steps=2))
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2"]


@pytest.mark.parametrize("overrides, message", [
    ("d_model=abc", r"d_model='abc' is not a valid int"),
    ("dropout", r"'dropout' is not name=value"),
    ("dropout=0.3,,encoder_layers=2", r"'' is not name=value"),
    ("=3", r"'=3' is not name=value"),
    ("encoder_layer=3", r"dwlstm configs have no field 'encoder_layer'"),
    ("tie_word_embeddings=maybe", r"tie_word_embeddings='maybe' is not a valid bool"),
])
def test_config_overrides_errors_name_the_bad_item(overrides, message):
    with pytest.raises(ValueError, match=message):
        apply_config_overrides(DwLstmConfig(), overrides)


def test_config_overrides_accept_spaces_after_commas():
    config = DwLstmConfig()
    apply_config_overrides(config, "dropout=0.3, encoder_layers=2 ,d_model = 64")
    assert (config.dropout, config.encoder_layers, config.d_model) == (0.3, 2, 64)


# --- Scripts: exit codes and one-line errors ---------------------------------------------------------------------

def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPOSITORY)}
    return subprocess.run([sys.executable, str(REPOSITORY / "scripts" / name), *args], capture_output=True,
                          text=True, env=environment, timeout=300)


def test_train_script_exits_non_zero_on_divergence_with_one_line_and_logs_each_step_once(setup, tmp_path):
    finished = run_script(
        "train_translation.py", "--model_name_or_path", str(setup / "tiny.json"), "--tokenizer_name_or_path",
        str(setup / "tokenizer"), "--dataset", str(MULTI30K), "--source_lang", "en", "--target_lang", "de",
        "--max_train_pairs", "24", "--max_tokens", "160", "--max_steps", "4", "--warmup_steps", "0",
        "--learning_rate", "inf", "--logging_steps", "1", "--use_cpu", "--threads", "1", "--output_dir",
        str(tmp_path / "run"))
    assert finished.returncode == 1, finished.stderr[-2000:]
    assert finished.stderr.strip().splitlines()[-1].startswith("error: Training diverged at step 2")
    assert "Traceback" not in finished.stderr
    assert finished.stderr.count("step 1/4 |") == 1, finished.stderr[-2000:]
    assert "{'loss'" not in finished.stdout + finished.stderr, "the Trainer's dict is not printed besides our line"


def test_tokenizer_and_evaluation_scripts_refuse_non_empty_output_folders(saved, tmp_path):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("mine")
    finished = run_script("train_tokenizer.py", "--dataset", str(MULTI30K), "--source_lang", "en", "--target_lang",
                          "de", "--max_pairs", "50", "--merges", "50", "--output_dir", str(tmp_path / "tok"))
    assert finished.returncode == 1 and "holds tokenizer.json" in finished.stderr.strip().splitlines()[-1]
    assert (tmp_path / "tok" / "tokenizer.json").read_text() == "mine"


def test_atomic_writes_give_files_and_folders_the_usual_permissions(tmp_path):
    """tempfile makes its files 0600 and folders 0700; what the scripts write must be readable like any other file."""
    mask = os.umask(0o022)
    try:
        written = atomic_write_text(tmp_path / "results.json", "{}\n")
        with atomic_directory(tmp_path / "model") as staging:
            (staging / "config.json").write_text("{}")
    finally:
        os.umask(mask)
    assert oct(written.stat().st_mode & 0o777) == oct(0o644)
    assert oct((tmp_path / "model").stat().st_mode & 0o777) == oct(0o755)
