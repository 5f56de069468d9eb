"""Mistakes that a fresh set of probes (experiments/probes/probes.py) found silent, destructive or unclear: each is
now refused before any work with one line saying what was wrong and what to do, or handled (and said so)."""

import gzip
import json
import logging
import os
import stat
from pathlib import Path

import pytest
import torch
from conftest import run_as_main, run_script, tiny_model
from transformers import AutoModelForSeq2SeqLM

from modeling_dwlstm import DwLstmConfig
from modeling_dwlstm.paper_configs import write_hub_configs
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.checkpoints import (
    average_checkpoints,
    last_checkpoints,
    load_saved_model,
    load_saved_tokenizer,
    record_saved_folder,
)
from nmt_toolkit.data import load_parallel_corpus, train_sentence_tokenizer
from nmt_toolkit.evaluation import EvaluationArguments, results_table, run_evaluation
from nmt_toolkit.files import atomic_directory, atomic_write_json, prepare_output_dir, read_lines
from nmt_toolkit.hub import check_results_of
from nmt_toolkit.lab.plotting import check_figure_path
from nmt_toolkit.training import DataArguments, check_steps_left, parse_training_arguments, read_config_file

pytestmark = pytest.mark.usefixtures("one_thread")
REPOSITORY = Path(__file__).resolve().parents[1]

SENTENCES = ["a man rides a horse .", "two dogs play in the snow .", "ein mann reitet ein pferd .",
             "zwei hunde spielen im schnee .", "a woman reads .", "eine frau liest ."]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A tiny saved en-de model with its tokenizer, checksums and fingerprint."""
    tokenizer = train_joint_bpe_tokenizer(SENTENCES, vocab_size=80)
    torch.manual_seed(0)
    config = DwLstmConfig(**tokenizer_model_kwargs(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=2, ffn_dim=16, max_position_embeddings=64,
                          language_pairs=["en-de"])
    folder = tmp_path_factory.mktemp("model") / "model"
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record_saved_folder(folder)
    return folder


def write_pair(folder: Path, english: str = "a man .\ntwo dogs .\n", german: str = "ein mann .\nzwei hunde .\n"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.en").write_text(english, encoding="utf-8")
    (folder / "test.de").write_text(german, encoding="utf-8")
    return folder




def a_training_run(folder: Path, seed: int = 1) -> Path:
    """A folder shaped like a training run: checkpoint-2 with its Trainer state and recorded arguments."""
    checkpoint = folder / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (checkpoint / "optimizer.pt").write_bytes(b"hours of work")
    (checkpoint / "run_arguments.json").write_text(json.dumps({"seed": seed, "learning_rate": 0.001}))
    return folder


# --- Files: permissions, links, compressed and non-UTF-8 text -----------------------------------------------------

def test_files_written_atomically_are_readable_by_the_folders_other_users(tmp_path):
    atomic_write_json(tmp_path / "results.json", {"sacrebleu": 1.0})
    with atomic_directory(tmp_path / "model") as staging:
        (staging / "config.json").write_text("{}")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "results.json").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o777 & ~umask


def test_a_saved_model_is_readable_by_another_user(model):
    for path in (model / "checksums.json", model / "fingerprint.json"):
        assert path.stat().st_mode & stat.S_IROTH, f"{path.name} is readable by its owner only"


def test_a_broken_link_as_output_folder_is_named(tmp_path):
    (tmp_path / "out").symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match=r"out is a broken symbolic link \(to .*gone, which does not exist\); remove"):
        prepare_output_dir(tmp_path / "out")


def test_read_lines_reads_gzip_and_names_text_that_is_not_utf8(tmp_path):
    (tmp_path / "test.de.gz").write_bytes(gzip.compress(b"ein mann .\nzwei hunde .\n"))
    assert read_lines(tmp_path / "test.de.gz") == ["ein mann .", "zwei hunde ."]
    (tmp_path / "latin1.de").write_bytes("ein bär .\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.de is not UTF-8 text \(invalid .* on line 1\): convert it, e.g. "
                                         r"iconv -f latin1 -t utf-8"):
        read_lines(tmp_path / "latin1.de")


def test_a_compressed_test_set_is_evaluated_like_a_plain_one(model, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for language, text in (("en", "a man .\ntwo dogs .\n"), ("de", "ein mann .\nzwei hunde .\n")):
        (folder / f"test.{language}.gz").write_bytes(gzip.compress(text.encode()))
    results = run_evaluation(EvaluationArguments(model=str(model), output_dir=str(tmp_path / "eval"), num_beams=1,
                                                 max_new_tokens=2, source_file=str(folder / "test.en.gz"),
                                                 reference_file=str(folder / "test.de.gz"), target_lang="de"))
    assert results["sentences"] == 2


# --- Folders replaced whole: never a training run -------------------------------------------------------------------

def test_replacing_a_folder_that_holds_a_training_run_is_refused(tmp_path):
    run = a_training_run(tmp_path / "run")
    message = r"holds a training run or checkpoint \(checkpoint-2\): --overwrite_output_dir would delete it"
    with pytest.raises(ValueError, match=message):
        prepare_output_dir(run, overwrite=True, replaced_whole=True)
    with pytest.raises(ValueError, match=r"holds a training run or checkpoint \(trainer_state.json, optimizer.pt\)"):
        with atomic_directory(run / "checkpoint-2", replace=True):
            pass
    assert (run / "checkpoint-2" / "optimizer.pt").read_bytes() == b"hours of work"
    prepare_output_dir(run, overwrite=True)  # writing beside it (an evaluation) is still allowed


def test_a_tokenizer_is_not_written_over_a_training_run(tmp_path):
    run = a_training_run(tmp_path / "run")
    folder = write_pair(tmp_path / "data")
    with pytest.raises(ValueError, match=r"holds a training run or checkpoint"):
        run_script("train_tokenizer", "--dataset", folder, "--split", "test", "--source_lang", "en", "--target_lang",
                   "de", "--merges", 10, "--output_dir", run, "--overwrite_output_dir")
    assert (run / "checkpoint-2" / "optimizer.pt").is_file()


# --- Corpora: ambiguous and broken files, a text file given as the corpus, few merges ---------------------------

def test_a_plain_and_a_compressed_file_of_one_language_are_refused(tmp_path):
    folder = write_pair(tmp_path / "data")
    (folder / "test.de.gz").write_bytes(gzip.compress(b"alt .\nalt .\n"))
    with pytest.raises(ValueError, match=r"holds both test.de and test.de.gz: keep one of them"):
        load_parallel_corpus(folder, "en", "de", "test")


def test_a_broken_link_in_a_corpus_folder_is_named(tmp_path):
    folder = write_pair(tmp_path / "data")
    (folder / "test.de").unlink()
    (folder / "test.de").symlink_to(tmp_path / "moved.de")
    with pytest.raises(ValueError, match=r"test.de is a broken symbolic link \(to .*moved.de, which does not exist\)"):
        load_parallel_corpus(folder, "en", "de", "test")


def test_a_text_file_given_as_the_corpus_is_named(tmp_path):
    (tmp_path / "train.en").write_text("a man .\n")
    with pytest.raises(ValueError, match=r"train.en is not a JSON-lines file .*give the folder that holds "
                                         r"\{split\}.\{lang\}\[.gz\] files"):
        load_parallel_corpus(tmp_path / "train.en", "en", "de")
    (tmp_path / "pairs.jsonl").write_text('{"en": "a", "de": "b"}\nnot json\n')
    with pytest.raises(ValueError, match=r"pairs.jsonl, line 2: not valid JSON"):
        load_parallel_corpus(tmp_path / "pairs.jsonl", "en", "de")


def test_far_fewer_merges_than_asked_are_said(caplog):
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.data"):
        train_sentence_tokenizer(lambda: iter(SENTENCES), merges=300, min_frequency=1000)
    assert "Only 0 of the 300 merges asked for were learnt" in caplog.text and "--min_frequency" in caplog.text


@pytest.mark.parametrize("tool", ["train_tokenizer", "train_translation"])
def test_more_datasets_without_language_pairs_is_refused(tool, tmp_path):
    flags = ["--dataset", "d", "--source_lang", "en", "--target_lang", "de", "--more_datasets", "extra=en-de",
             "--output_dir", str(tmp_path / "out")]
    if tool == "train_tokenizer":
        code, stderr = run_as_main("train_tokenizer", *flags)
        assert code == 2 and "--more_datasets adds sources to a multilingual tokenizer" in stderr, stderr
    else:
        with pytest.raises(ValueError, match=r"--more_datasets adds sources to a multilingual run: pass "
                                             r"--language_pairs"):
            parse_training_arguments(["--model_name_or_path", "m.json", *flags])
        DataArguments(dataset="d", language_pairs="en-de", more_datasets=["extra=en-de"])  # multilingual: fine


# --- Training: config files, epochs, learning rates, resuming past the end -----------------------------------------

def test_config_files_with_fields_no_config_reads_are_refused(tmp_path):
    (tmp_path / "tiny.json").write_text(json.dumps({"model_type": "dwlstm", "num_layers": 3, "encoder_layer": 2}))
    with pytest.raises(ValueError, match=r"tiny.json: 'encoder_layer' \(did you mean 'encoder_layers'\?\); "
                                         r"'num_layers'.* are not fields of dwlstm configs"):
        read_config_file(tmp_path / "tiny.json")
    saved = json.loads((REPOSITORY / "hub_configs" / "dwlstm-base-6l.json").read_text())
    (tmp_path / "saved.json").write_text(json.dumps({**saved, "architectures": ["DwLstmForConditionalGeneration"],
                                                     "transformers_version": "5.24.0", "hidden_size": 512}))
    assert read_config_file(tmp_path / "saved.json")["d_model"] == 512  # a saved config.json, an alias: fine


def test_a_folder_given_as_a_config_file_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"Config file .* is a folder; give a config JSON file"):
        read_config_file(tmp_path)


@pytest.mark.parametrize("flags, message", [
    (["--num_train_epochs", "2"], r"--num_train_epochs has no effect while --max_steps is set \(it is 100,000 unless "
                                  r"given\): pass --max_steps -1 to train for 2 epochs"),
    (["--learning_rate", "nan"], r"--learning_rate must be a positive number, got nan"),
    (["--learning_rate", "-0.001"], r"--learning_rate must be a positive number, got -0.001"),
])
def test_training_settings_that_would_be_ignored_or_fail_late_are_refused(flags, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        parse_training_arguments(["--model_name_or_path", "m.json", "--dataset", "d", "--output_dir",
                                  str(tmp_path / "run"), *flags])


def test_resuming_a_checkpoint_that_has_max_steps_already_is_refused(tmp_path):
    checkpoint = a_training_run(tmp_path / "run") / "checkpoint-2"
    with pytest.raises(ValueError, match=r"checkpoint-2: it has 2 updates already, as many as --max_steps 2 or more.*"
                                         r"Pass a larger --max_steps"):
        check_steps_left(checkpoint, 2)
    check_steps_left(checkpoint, 3)
    check_steps_left(checkpoint, -1)  # by epochs: the Trainer knows


# --- Averaging: the arguments, checkpoints of two runs, a checkpoint given as the run -----------------------------

def test_averaging_checkpoints_of_two_runs_is_refused(tmp_path):
    first, second = a_training_run(tmp_path / "seed1"), a_training_run(tmp_path / "seed2", seed=2)
    with pytest.raises(ValueError, match=r"seed2/checkpoint-2 and .*seed1/checkpoint-2 are checkpoints of different "
                                         r"training runs \(seed 1 -> 2\)"):
        average_checkpoints([first / "checkpoint-2", second / "checkpoint-2"], tmp_path / "avg")
    assert not (tmp_path / "avg").exists()


def test_averaging_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match=r"must be a list of checkpoint folders, got the single path"):
        average_checkpoints(str(tmp_path), tmp_path / "avg")
    with pytest.raises(ValueError, match=r"No such checkpoint folder: .*checkpoint-99\. Check the paths"):
        average_checkpoints([tmp_path / "checkpoint-99"], tmp_path / "avg")
    run = a_training_run(tmp_path / "run")
    with pytest.raises(ValueError, match=r"checkpoint-2 is a checkpoint, not a run folder: give the run folder"):
        last_checkpoints(run / "checkpoint-2", 1)


def test_average_checkpoints_script_refuses_last_zero(tmp_path):
    code, stderr = run_as_main("average_checkpoints", "--run_dir", tmp_path, "--last", "0", "--output_dir",
                               tmp_path / "avg")
    assert code == 2 and "argument --last: must be a positive integer, got '0'" in stderr


def test_a_run_without_its_final_model_names_its_checkpoints(tmp_path):
    run = a_training_run(tmp_path / "run")
    message = r"is a training run without a final model \(stopped, or still training\): give one of its checkpoints"
    with pytest.raises(ValueError, match=message):
        load_saved_model(run)
    with pytest.raises(ValueError, match=message):
        load_saved_tokenizer(run, "--model")


# --- Evaluation and sharing: the same file twice, results of another model, baselines of other directions --------

def test_the_source_file_as_its_own_reference_is_refused(model, tmp_path):
    folder = write_pair(tmp_path / "data")
    with pytest.raises(ValueError, match=r"--source_file and --reference_file are the same file .*Give the "
                                         r"target-language references"):
        run_evaluation(EvaluationArguments(model=str(model), output_dir=str(tmp_path / "eval"),
                                           source_file=str(folder / "test.en"), reference_file=str(folder / "test.en")))


def test_results_of_another_model_are_refused_for_the_card(model, tmp_path):
    folder = write_pair(tmp_path / "data")
    results = run_evaluation(EvaluationArguments(model=str(model), output_dir=str(tmp_path / "eval"), num_beams=1,
                                                 max_new_tokens=2, source_file=str(folder / "test.en"),
                                                 reference_file=str(folder / "test.de"), target_lang="de"))
    assert len(results["model_weights_sha256"]) == 64
    check_results_of(results, model, "eval/results.json")
    other = tmp_path / "other"
    AutoModelForSeq2SeqLM.from_config(AutoModelForSeq2SeqLM.from_pretrained(model).config).save_pretrained(other)
    with pytest.raises(ValueError, match=r"--results eval/results.json are the scores of another model"):
        check_results_of(results, other, "eval/results.json")
    old = {key: value for key, value in results.items() if key != "model_weights_sha256"}  # written before: by path
    with pytest.raises(ValueError, match=r"are the scores of another model"):
        check_results_of(old, other, "eval/results.json")


def test_a_baseline_of_other_directions_is_named():
    system = {"directions": {"en-de": {"sacrebleu": 1.0, "chrf": 2.0}}, "averages": {}}
    baseline = {"directions": {"en-fr": {"sacrebleu": 1.0, "chrf": 2.0}}, "averages": {}}
    with pytest.raises(ValueError, match=r"The baseline has no \['en-de'\] \(it has \['en-fr'\]\)"):
        results_table(system, baseline)


def test_the_layer_analysis_warns_about_a_direction_the_model_was_not_trained_for(model, tmp_path, caplog):
    folder = write_pair(tmp_path / "data", "a man .\ntwo dogs .\n" * 4, "ein mann .\nzwei hunde .\n" * 4)
    (folder / "train.en").write_text((folder / "test.en").read_text())
    (folder / "train.de").write_text((folder / "test.de").read_text())
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.evaluation"):
        run_script("analyze_layers", "--model", model, "--data", folder, "--source_lang", "de", "--target_lang", "en",
                   "--fit_steps", 1, "--fit_batch_size", 4, "--max_sentences", 2, "--num_beams", 1, "--output_dir",
                   tmp_path / "layers")
    assert "lists the direction(s) ['en-de'], not de-en" in caplog.text


# --- The lab's scripts: figure names, hand-edited presets, unknown overrides ---------------------------------------

def test_a_figure_path_must_name_a_picture(tmp_path):
    for path in ("run/trainer_state.json", "curves"):
        with pytest.raises(ValueError, match=rf"--output {path}: a figure file name ends in .png, .pdf, .svg"):
            check_figure_path(path)
    assert check_figure_path("curves.PDF") == Path("curves.PDF")


def test_hand_edited_presets_are_not_overwritten(tmp_path):
    written = write_hub_configs(tmp_path)
    write_hub_configs(tmp_path)  # the same presets again: nothing to refuse
    preset = tmp_path / "dwlstm-base-6l.json"
    preset.write_text(preset.read_text().replace('"dropout": 0.1', '"dropout": 0.3'))
    with pytest.raises(ValueError, match=r"holds 1 preset\(s\) that differ from the papers' settings \(e.g. "
                                         r"dwlstm-base-6l.json, edited by hand\?\): pass --overwrite"):
        write_hub_configs(tmp_path)
    assert '"dropout": 0.3' in preset.read_text()
    assert write_hub_configs(tmp_path, overwrite=True) == written and '"dropout": 0.1' in preset.read_text()


def test_depth_diagnosis_refuses_overrides_no_config_reads(tmp_path):
    (tmp_path / "tiny.json").write_text(json.dumps({"model_type": "dwlstm"}))
    with pytest.raises(ValueError, match=r"--config_overrides: 'num_layers' \(did you mean 'encoder_layers'\?\) is not "
                                         r"a field of dwlstm configs"):
        run_script("diagnose_depth", "--data", tmp_path, "--tokenizer", tmp_path, "--configs", tmp_path / "tiny.json",
                   "--config_overrides", '{"num_layers": 2}', "--output_dir", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- generate() on a padded batch without its attention mask ----------------------------------------------------

def test_generate_derives_the_mask_of_padded_sources_given_without_it():
    model = tiny_model("dwlstm")
    input_ids = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 1, 1]])  # the second sentence padded with the pad id 1
    settings = dict(num_beams=1, max_new_tokens=4, output_scores=True, return_dict_in_generate=True)
    masked = model.generate(input_ids=input_ids, attention_mask=input_ids.ne(1).long(), **settings)
    unmasked = model.generate(input_ids=input_ids, **settings)
    assert torch.equal(masked.sequences, unmasked.sequences)
    assert all(torch.allclose(a, b) for a, b in zip(masked.scores, unmasked.scores))


def test_lab_outputs_that_cannot_be_written_are_named_before_the_work(tmp_path, monkeypatch):
    code, stderr = run_as_main("measure_gradient_norms", "--data_dir", tmp_path / "missing", "--output", tmp_path)
    assert code == 2 and f"--output {tmp_path} is a folder; give the JSON file to write" in stderr, stderr
    folder = tmp_path / "model"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root writes anywhere: the folder is made read-only for the check instead
            real_access = os.access
            monkeypatch.setattr(os, "access", lambda path, mode: mode != os.W_OK and real_access(path, mode))
        code, stderr = run_as_main("record_checksums", folder)
        assert code == 1 and "cannot be written by this user (permission denied)" in stderr, stderr
    finally:
        folder.chmod(0o755)
