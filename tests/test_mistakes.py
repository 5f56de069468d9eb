"""A user's mistakes that used to pass silently or end in a traceback: each is refused before any work with one
line saying what was wrong and what to do, or handled and said so (a missing optional package, a closed pipe)."""

import configparser
import contextlib
import dataclasses
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import datasets
import huggingface_hub.constants
import pytest
import torch
from conftest import MULTI30K, read_multi30k, run_as_main, run_script
from ctranslate2.specs import model_spec
from hub_server import LoopbackHub
from safetensors import SafetensorError
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, Seq2SeqTrainer, pipeline

from modeling_dwlstm import DwLstmConfig, HighwayTransformerConfig, ResidualTransformerConfig
from modeling_dwlstm.generation_translation import SHORTLIST_FILE, Shortlist
from modeling_dwlstm.tokenization_dwlstm import normalizes_unicode, tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit import evaluation as evaluation_module
from nmt_toolkit import onnx_export
from nmt_toolkit.checkpoints import load_saved_model
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.data import check_unknown_tokens, load_parallel_corpus, tokenize_pairs, train_corpus_tokenizer
from nmt_toolkit.evaluation import EvaluationArguments, run_evaluation, score_translations, translate_sentences
from nmt_toolkit.files import read_lines, write_checksums
from nmt_toolkit.hub import push_translation_model
from nmt_toolkit.lab.experiments import StageFailed
from nmt_toolkit.lab.plotting import read_log_history
from nmt_toolkit.multilingual import corpus_languages, parse_sources
from nmt_toolkit.training import (
    DataArguments,
    ModelArguments,
    TranslationTrainingArguments,
    apply_config_overrides,
    parse_training_arguments,
    train_translation,
)

REPOSITORY = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k is not at {MULTI30K}")]


def save_model(folder: Path, tokenizer, language_pairs: list[str], config_class=DwLstmConfig) -> Path:
    torch.manual_seed(0)
    config = config_class(**tokenizer_model_kwargs(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=2, ffn_dim=16,
                          max_position_embeddings=128, language_pairs=language_pairs)
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_checksums(folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A bilingual en-de model (no tags) and a multilingual one with the tags <2de>, <2en>, <2fr> (not <2cs>)."""
    folder = tmp_path_factory.mktemp("models")
    texts = {language: read_multi30k("train", language, 60) for language in ("en", "de", "fr", "cs")}
    every_text = [text for language_texts in texts.values() for text in language_texts]
    bilingual = train_joint_bpe_tokenizer(texts["en"] + texts["de"] + texts["cs"], vocab_size=400)
    tagged = train_joint_bpe_tokenizer(every_text, vocab_size=500, language_tags=["<2de>", "<2en>", "<2fr>"])
    return {
        "bilingual": save_model(folder / "bilingual", bilingual, ["en-de"]),
        "multilingual": save_model(folder / "multilingual", tagged, ["en-de", "de-en", "en-fr", "fr-en"]),
    }


def evaluation(model, output_dir, **settings) -> EvaluationArguments:
    return EvaluationArguments(model=str(model), output_dir=str(output_dir), num_beams=1, max_new_tokens=3,
                               **settings)


# --- Off-target rates without py3langid ---------------------------------------------------------------------------

def test_the_train_extra_installs_the_language_identifier():
    setup = configparser.ConfigParser()
    setup.read(REPOSITORY / "setup.cfg")
    assert "py3langid" in setup["options.extras_require"]["train"]


def test_multilingual_evaluation_without_py3langid_skips_off_target_rates_and_says_so(models, tmp_path, monkeypatch,
                                                                                        caplog):
    monkeypatch.setitem(sys.modules, "py3langid", None)  # as on an install without it
    monkeypatch.setitem(sys.modules, "py3langid.langid", None)
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.evaluation"):
        results = run_evaluation(evaluation(models["multilingual"], tmp_path / "eval", data=str(MULTI30K),
                                            split="test_2016_flickr", max_pairs=2, language_pairs="en-de,de-en"))
    assert "Off-target rates need py3langid" in caplog.text and "skipped" in caplog.text
    assert "py3langid" in results["off_target_skipped"] and results["language_id"] is None
    assert all(scores["off_target_rate"] is None for scores in results["directions"].values())
    assert json.loads((tmp_path / "eval" / "results.json").read_text())["off_target_skipped"] == \
        results["off_target_skipped"]


# --- Files: line counts with --max_pairs, lone carriage returns, byte-order marks, empty references -----------------

def write_pair(folder: Path, english: str, german: str, split: str = "test") -> Path:
    folder.mkdir(exist_ok=True)
    (folder / f"{split}.en").write_bytes(english.encode("utf-8"))
    (folder / f"{split}.de").write_bytes(german.encode("utf-8"))
    return folder


def test_max_pairs_still_checks_that_the_files_have_the_same_number_of_lines(models, tmp_path):
    folder = write_pair(tmp_path / "data", "a man .\ntwo dogs .\na cat .\n", "EXTRA LINE\nein mann .\nzwei hunde .\n"
                        "eine katze .\n")
    with pytest.raises(ValueError, match="Line counts differ: .*test.en ends before line 4"):
        load_parallel_corpus(folder, "en", "de", "test", max_pairs=2)
    with pytest.raises(ValueError, match="Line counts differ"):
        run_evaluation(evaluation(models["bilingual"], tmp_path / "eval", data=str(folder), split="test",
                                  source_lang="en", target_lang="de", max_pairs=2))
    assert not (tmp_path / "eval" / "results.json").exists()


def test_training_with_max_train_pairs_still_checks_the_line_counts(tmp_path):
    folder = write_pair(tmp_path / "data", "a man .\ntwo dogs .\n", "EXTRA\nein mann .\nzwei hunde .\n", "train")
    tokenizer = train_joint_bpe_tokenizer(["a man .", "two dogs .", "EXTRA", "ein mann .", "zwei hunde ."],
                                          vocab_size=60)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    (tmp_path / "tiny.json").write_text(json.dumps({"model_type": "dwlstm", "d_model": 16, "ffn_dim": 16,
                                                    "encoder_layers": 1, "decoder_layers": 1,
                                                    "encoder_attention_heads": 2, "decoder_attention_heads": 2}))
    arguments = (ModelArguments(str(tmp_path / "tiny.json"), str(tmp_path / "tokenizer")),
                 DataArguments(dataset=str(folder), source_lang="en", target_lang="de", max_train_pairs=1),
                 TranslationTrainingArguments(output_dir=str(tmp_path / "run"), max_steps=1, use_cpu=True))
    with pytest.raises(ValueError, match="Line counts differ: .*train.en ends before line 3"):
        train_translation(*arguments)


@pytest.mark.parametrize("reader", ["read_lines", "folder", "evaluation"])
def test_lone_carriage_return_line_ends_are_refused(reader, models, tmp_path):
    folder = write_pair(tmp_path / "data", "a man .\rtwo dogs .\ra cat .\r", "ein mann .\rzwei hunde .\reine katze .\r")
    with pytest.raises(ValueError, match=r"test.(en|de): its lines end in lone carriage returns .*tr '\\r' '\\n'"):
        if reader == "read_lines":
            read_lines(folder / "test.de")
        elif reader == "folder":
            load_parallel_corpus(folder, "en", "de", "test", max_pairs=1)
        else:
            run_evaluation(evaluation(models["bilingual"], tmp_path / "eval", source_file=str(folder / "test.en"),
                                      reference_file=str(folder / "test.de"), target_lang="de"))
    assert read_lines(write_pair(tmp_path / "ok", "one\rinside\n", "eins\n") / "test.en") == ["one\rinside"]


def test_a_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    folder = write_pair(tmp_path / "data", "\ufeffa man .\ntwo dogs .\n", "\ufeffein mann .\nzwei hunde .\n")
    assert read_lines(folder / "test.de") == ["ein mann .", "zwei hunde ."]
    assert load_parallel_corpus(folder, "en", "de", "test")["translation"][0] == {"en": "a man .", "de": "ein mann ."}
    (tmp_path / "pairs.jsonl").write_text('\ufeff{"en": "a man .", "de": "ein mann ."}\n', encoding="utf-8")
    assert len(load_parallel_corpus(tmp_path / "pairs.jsonl", "en", "de")) == 1


def test_empty_references_are_named_in_a_warning(models, tmp_path, caplog):
    folder = write_pair(tmp_path / "data", "a man .\ntwo dogs .\na cat .\n", "ein mann .\n\n \n")
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.evaluation"):
        run_evaluation(evaluation(models["bilingual"], tmp_path / "eval", source_file=str(folder / "test.en"),
                                  reference_file=str(folder / "test.de"), source_lang="en", target_lang="de"))
    assert "2 empty reference line(s) (the first: line 2)" in caplog.text


# --- Directions the model has no tag for ----------------------------------------------------------------------------

@pytest.mark.parametrize("model, settings, message", [
    ("multilingual", {"language_pairs": "en-cs"}, r"no tag <2cs> for the direction en-cs: it translates into "
                                                  r"\['de', 'en', 'fr'\]"),
    ("multilingual", {"language_pairs": "cs-de"}, r"does not know the source language of cs-de"),
    ("bilingual", {"language_pairs": "en-de"}, r"no language tags .* bilingual model \(en-de\)\. Evaluate it with "
                                               r"--source_lang and --target_lang"),
    ("multilingual", {"source_lang": "en", "target_lang": "de"}, r"reserves the language tags .*<2de>.* Evaluate it "
                                                                 r"with --add_language_tag, or with --language_pairs "
                                                                 r"en-de"),
    ("multilingual", {"source_lang": "en", "target_lang": "cs", "add_language_tag": True}, r"no tag <2cs>"),
])
def test_directions_the_model_cannot_be_asked_for_are_refused_before_decoding(models, model, settings, message,
                                                                             tmp_path, monkeypatch):
    monkeypatch.setattr(evaluation_module, "translate_sentences", lambda *args, **kwargs: pytest.fail("decoded"))
    with pytest.raises(ValueError, match=message):
        run_evaluation(evaluation(models[model], tmp_path / "eval", data=str(MULTI30K), split="test_2016_flickr",
                                  max_pairs=2, **settings))
    assert not (tmp_path / "eval" / "results.json").exists()


def test_the_layer_analysis_refuses_a_model_trained_with_tags(models, tmp_path):
    with pytest.raises(ValueError, match=r"was trained with language tags .*<2de>.* Analyse a bilingual model"):
        run_script("analyze_layers", "--model", models["multilingual"], "--data", MULTI30K, "--source_lang", "en",
                   "--target_lang", "de", "--split", "test_2016_flickr", "--fit_steps", 1, "--max_sentences", 2,
                   "--output_dir", tmp_path / "layers")


# --- Numbers and devices --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("settings, message", [
    ({"length_penalty": float("nan")}, "--length_penalty must be a finite number, got nan"),
    ({"max_pairs": -1}, "--max_pairs must be a positive integer, got -1"),
    ({"max_pairs": 0}, "--max_pairs must be a positive integer, got 0"),
    ({"num_beams": 0}, "--num_beams must be a positive integer, got 0"),
    ({"max_new_tokens": 0}, "--max_new_tokens must be a positive integer, got 0"),
    ({"max_tokens": -4}, "--max_tokens must be a positive integer, got -4"),
    ({"bootstrap_samples": 0}, "--bootstrap_samples must be a positive integer, got 0"),
    ({"device": "gpu"}, "--device 'gpu' is not a device name: use cpu, cuda"),
    ({"device": "cuda:0"}, r"--device cuda:0: PyTorch sees no cuda device on this machine .*use --device cpu"),
])
def test_evaluation_numbers_and_devices_are_checked_before_any_work(models, settings, message, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    folder = write_pair(tmp_path / "data", "a man .\ntwo dogs .\n", "ein mann .\nzwei hunde .\n")
    arguments = {"num_beams": 1, "max_new_tokens": 3, **settings}
    with pytest.raises(ValueError, match=message):
        run_evaluation(EvaluationArguments(model=str(models["bilingual"]), output_dir=str(tmp_path / "eval"),
                                           source_file=str(folder / "test.en"), reference_file=str(folder / "test.de"),
                                           target_lang="de", **arguments))
    assert not (tmp_path / "eval").exists()


def test_translate_sentences_checks_its_decoding_settings(models):
    model, tokenizer = load_saved_model(models["bilingual"]), None
    for settings, message in (({"num_beams": 0}, "--num_beams"), ({"length_penalty": float("inf")}, "--length_penalty"),
                              ({"max_new_tokens": 0}, "--max_new_tokens")):
        with pytest.raises(ValueError, match=f"{message} must be"):
            translate_sentences(model, tokenizer, ["a man ."], **settings)


@pytest.mark.parametrize("flags, message", [
    (["--max_steps", "0"], "--max_steps must be a positive number of updates, or -1 to train for --num_train_epochs"),
    (["--max_steps", "-5"], "--max_steps must be a positive number of updates, or -1"),
    (["--max_steps", "-1", "--num_train_epochs", "0"], "--num_train_epochs must be a positive number"),
    (["--gradient_accumulation_steps", "0"], "--gradient_accumulation_steps must be a positive integer, got 0"),
    (["--per_device_train_batch_size", "64"], "batches are made by token count here: --per_device_train_batch_size"),
    (["--auto_find_batch_size"], "--auto_find_batch_size have no effect. Set --max_tokens"),
    (["--per_device_eval_batch_size", "0"], "--per_device_eval_batch_size must be a positive integer"),
    (["--save_steps", "0"], "--save_steps must be a positive number"),
    (["--max_grad_norm", "-1"], "--max_grad_norm must be at least 0"),
    (["--generation_num_beams", "0"], "--generation_num_beams must be a positive integer"),
    (["--max_tokens", "0"], "--max_tokens must be a positive integer, got 0"),
    (["--max_length", "-1"], "--max_length must be a positive integer"),
    (["--target_tokens_per_update", "0"], "--target_tokens_per_update must be a positive integer, got 0"),
    (["--max_train_pairs", "-1"], "--max_train_pairs must be a positive integer, got -1"),
    (["--max_validation_pairs", "0"], "--max_validation_pairs must be a positive integer"),
    (["--sampling_temperature", "0"], "--sampling_temperature must be a positive number"),
    (["--max_unknown_share", "nan"], "--max_unknown_share must be a finite number"),
])
def test_training_numbers_are_refused_when_parsed(flags, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        parse_training_arguments(["--model_name_or_path", "m.json", "--dataset", "d", "--output_dir",
                                  str(tmp_path / "run"), *flags])
    assert not (tmp_path / "run").exists()


def test_training_still_takes_epochs_with_max_steps_minus_one(tmp_path):
    *_, training = parse_training_arguments(["--model_name_or_path", "m.json", "--dataset", "d", "--output_dir",
                                             str(tmp_path), "--max_steps", "-1", "--num_train_epochs", "2"])
    assert (training.max_steps, training.num_train_epochs) == (-1, 2)


# --- Training: a tokenizer that cannot spell the language, config files ---------------------------------------------

@pytest.fixture(scope="module")
def english_only(tmp_path_factory):
    """A tokenizer trained on English alone (German's umlauts and ß are unknown to it) and a tiny config."""
    folder = tmp_path_factory.mktemp("english-only")
    train_joint_bpe_tokenizer(read_multi30k("train", "en", 200), vocab_size=300).save_pretrained(folder / "tokenizer")
    (folder / "tiny.json").write_text(json.dumps({"model_type": "dwlstm", "d_model": 16, "ffn_dim": 16,
                                                  "encoder_layers": 1, "decoder_layers": 1,
                                                  "encoder_attention_heads": 2, "decoder_attention_heads": 2}))
    return folder


def training_arguments(folder: Path, output_dir: Path, config: str = "tiny.json", **data):
    return (ModelArguments(str(folder / config), str(folder / "tokenizer")),
            DataArguments(dataset=str(MULTI30K), source_lang="en", target_lang="de", max_train_pairs=200,
                          max_tokens=400, **data),
            TranslationTrainingArguments(output_dir=str(output_dir), max_steps=1, warmup_steps=0, use_cpu=True,
                                         save_strategy="no", disable_tqdm=True))


def test_training_refuses_a_tokenizer_that_cannot_spell_the_target_language(english_only, tmp_path):
    with pytest.raises(ValueError, match=r"\d\.\d% of the de \(target\) tokens of the en-de training pairs are <unk> "
                                         r"\([\d,]+ of [\d,]+\): the tokenizer cannot spell this language.*"
                                         r"--max_unknown_share 1 to train anyway"):
        train_translation(*training_arguments(english_only, tmp_path / "run"))
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_a_few_unknown_tokens_are_a_warning(english_only, caplog):

    tokenizer = AutoTokenizer.from_pretrained(english_only / "tokenizer")
    pairs = tokenize_pairs(load_parallel_corpus(MULTI30K, "en", "de", max_pairs=50), tokenizer, "en", "de")
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.data"):
        check_unknown_tokens(pairs, tokenizer, limit=1.0, languages=("en", "de"))
    assert "of the de (target) tokens of the en-de training pairs are <unk>" in caplog.text
    assert "of the en (source)" not in caplog.text
    ok = train_corpus_tokenizer([load_parallel_corpus(MULTI30K, "en", "de", max_pairs=50)], ["en", "de"], merges=50)
    check_unknown_tokens(tokenize_pairs(load_parallel_corpus(MULTI30K, "en", "de", max_pairs=50), ok, "en", "de"), ok)


@pytest.mark.parametrize("text, message", [
    ('{"model_type": "dwlstm",, "d_model": 16}', r"Config file \S+broken.json is not valid JSON \(Expecting"),
    ('{"model_type": "dwlsmt"}', r"broken.json: model_type 'dwlsmt' is not a known model type \(did you mean "
                                 r"'dwlstm'\?\); this family's types: \['dwlstm', 'dwlstm-residual'"),
])
def test_config_files_with_errors_are_named(english_only, text, message, tmp_path):
    (english_only / "broken.json").write_text(text)
    with pytest.raises(ValueError, match=message) as error:
        train_translation(*training_arguments(english_only, tmp_path / "run", config="broken.json"))
    assert len(str(error.value)) < 400, "the family's types, not all of transformers'"


def test_damaged_json_files_are_named(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trainer_state.json").write_text("{")
    with pytest.raises(ValueError, match=r"run/trainer_state.json is not a readable Trainer state"):
        read_log_history(tmp_path / "run")
    (tmp_path / "pairs.jsonl").write_text("not json\n")
    with pytest.raises(ValueError, match=r"pairs.jsonl, first line: not a JSON object"):
        corpus_languages(tmp_path / "pairs.jsonl")


# --- Paths that are not there, and the Hub out of reach ----------------------------------------------------------

@pytest.fixture
def unreachable_hub(monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: pytest.fail("asked the Hub"))


def test_a_mistyped_local_path_shaped_like_a_hub_id_is_answered_at_once(unreachable_hub, tmp_path):
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"--model rnus/dwlstm: no such local folder, and the Hub "
                                         r"\(http://127.0.0.1:9\) cannot be reached .*Check the path, or the network"):
        run_evaluation(EvaluationArguments(model="rnus/dwlstm", output_dir=str(tmp_path / "eval"), data=str(MULTI30K),
                                           split="test_2016_flickr", source_lang="en", target_lang="de", max_pairs=1))
    with pytest.raises(ValueError, match=r"The corpus dat/multi30k: no such local folder, and the Hub "
                                         r"\(http://127.0.0.1:9\) cannot be reached"):
        load_parallel_corpus("dat/multi30k", "en", "de")
    assert time.monotonic() - started < 20


def test_a_corpus_path_that_does_not_exist_is_not_looked_up_on_the_hub(monkeypatch):
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: pytest.fail("asked the Hub"))
    for path in ("data/multi30k/typo", "./m30k", "~/corpora/m30k"):
        with pytest.raises(ValueError, match=f"{path}: no such folder or file"):
            load_parallel_corpus(path, "en", "de")


def test_pushing_without_a_network_is_one_clear_error(models):
    model = load_saved_model(models["bilingual"])
    with pytest.raises(ValueError, match=r"Cannot push user/model to the Hub at http://127.0.0.1:9: .*Check the "
                                         r"network, HF_ENDPOINT and the login"):
        push_translation_model(model, None, "user/model", "card", token="hf_unused", endpoint="http://127.0.0.1:9")


# --- Scripts: one line, no traceback; argparse checks counts and devices ------------------------------------------



@pytest.mark.parametrize("name, flags, message", [
    ("analyze_layers", ["--num_beams", "0"], "argument --num_beams: must be a positive integer, got '0'"),
    ("analyze_layers", ["--fit_steps", "-3"], "argument --fit_steps: must be a positive integer"),
    ("analyze_layers", ["--device", "gpu"], "argument --device: 'gpu' is not a device name: use cpu, cuda"),
    ("plot_internals", ["--batch_size", "0"], "argument --batch_size: must be a positive integer"),
    ("plot_internals", ["--threads", "0"], "argument --threads: must be a positive integer"),
    ("diagnose_depth", ["--steps", "0"], "argument --steps: must be a positive integer"),
    ("diagnose_depth", ["--learning_rate", "nan"], "argument --learning_rate: must be a finite number"),
    ("diagnose_depth", ["--warmup_steps", "-1"], "argument --warmup_steps: must be zero or a positive integer"),
    ("measure_speed", ["--threads", "0"], "argument --threads: must be a positive integer"),
    ("measure_speed", ["--repeats", "0"], "argument --repeats: must be a positive integer"),
    ("quickstart", ["--max_steps", "0"], "argument --max_steps: must be a positive integer"),
    ("quickstart", ["--threads", "0"], "argument --threads: must be a positive integer"),
    ("run_experiments", ["--threads", "0"], "argument --threads: must be a positive integer"),
    ("measure_gradient_norms", ["--steps", "0"], "argument --steps: must be a positive integer"),
    ("train_tokenizer", ["--model_max_length", "0"], "argument --model_max_length: must be a positive integer"),
])
def test_script_counts_and_devices_are_usage_errors(name, flags, message, tmp_path):
    required = {"analyze_layers": ["--model", "m", "--data", "d", "--source_lang", "en", "--target_lang", "de"],
                "plot_internals": ["--model", "m"], "diagnose_depth": ["--data", "d", "--tokenizer", "t", "--configs",
                                                                        "c.json"],
                "run_experiments": ["e.json"], "train_tokenizer": ["--dataset", "d", "--source_lang", "en",
                                                                   "--target_lang", "de"]}.get(name, [])
    output = ["--output_dir", tmp_path / "out"] if name not in ("measure_speed", "run_experiments",
                                                                "measure_gradient_norms") else []
    code, stderr = run_as_main(name, *required, *output, *flags)
    assert code == 2 and message in stderr, stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, argv, message", [
    ("results_table", ["missing/results.json"], "error: Cannot read evaluation results from missing/results.json"),
    ("plot_training", ["missing-run", "--output", "x.png"], "error: missing-run has neither trainer_state.json"),
    ("run_experiments", ["missing.json"], "error: No experiment file missing.json"),
    ("measure_speed", ["--members", "no-such-member"], "error: Unknown members ['no-such-member']"),
    ("make_hub_configs", ["--output_dir", "a-file/configs"], "error: [Errno 20] Not a directory"),
    ("push_to_hub", ["--model", "missing/model/folder", "--repo_id", "u/m", "--training_data", "x"],
     "error: --model missing/model/folder: no such folder"),
    ("measure_gradient_norms", ["--data_dir", "missing/data/folder", "--steps", "1"],
     "error: missing/data/folder: no such folder or file"),
])
def test_scripts_end_in_one_line_without_a_traceback(name, argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    code, stderr = run_as_main(name, *argv)
    assert code == 1 and stderr.strip().splitlines()[-1].startswith(message), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def test_a_missing_optional_package_and_a_failed_campaign_stage_are_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "loss": 2.0}]}))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, stderr = run_as_main("plot_training", "run", "--output", "curves.png")
    assert code == 1 and stderr.strip() == 'error: Plotting needs matplotlib: pip install -e ".[plot]"', stderr

    def failing_stage():
        raise StageFailed("training failed (exit 1); its log is runs/x/train.log.")

    with contextlib.redirect_stderr(io.StringIO()) as stderr, pytest.raises(SystemExit) as exit_info:
        exit_on_error(failing_stage, also=(StageFailed,))
    assert exit_info.value.code == 1
    assert stderr.getvalue() == "error: training failed (exit 1); its log is runs/x/train.log.\n"


def test_quickstart_into_a_non_empty_folder_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("mine")
    code, stderr = run_as_main("quickstart", "--output_dir", "out")
    assert code == 1 and "error: Output folder out is not empty (holds mine.txt)" in stderr, stderr
    assert "Traceback" not in stderr


def test_push_to_hub_without_a_network_is_one_line(models, tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    code, stderr = run_as_main("push_to_hub", "--model", models["bilingual"], "--repo_id", "user/model",
                               "--training_data", "Multi30k", "--token", "hf_unused")
    assert code == 1 and stderr.strip().splitlines()[-1].startswith("error: Cannot push user/model to the Hub")
    assert "Traceback" not in stderr, stderr


def test_evaluation_into_a_closed_pipe_ends_without_a_traceback(models, tmp_path):
    """`evaluate_translation.py ... | head -1`: the reader has gone when the results are printed."""
    folder = write_pair(tmp_path / "data", "a man .\n", "ein mann .\n")
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPOSITORY)}
    process = subprocess.Popen(
        [sys.executable, str(REPOSITORY / "scripts" / "evaluate_translation.py"), "--model", str(models["bilingual"]),
         "--output_dir", str(tmp_path / "eval"), "--source_file", str(folder / "test.en"), "--reference_file",
         str(folder / "test.de"), "--num_beams", "1", "--max_new_tokens", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment)
    process.stdout.close()  # the reader stops before anything is printed
    stderr = process.stderr.read().decode()
    process.wait(timeout=300)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert process.returncode == 1
    assert (tmp_path / "eval" / "results.json").is_file(), "the results are written all the same"


# --- Overwriting: the folder ends as a fresh run leaves it, whatever it held and wherever the run stopped ----------

def folder_contents(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def quick_onnx_graphs(monkeypatch, interrupted_at: str | None = None):
    """The ONNX graph writers replaced by ones that write a line (torch.export takes seconds a graph): the folder's
    handling is under test, not the graphs. `interrupted_at`: the graph during which Ctrl-C is pressed."""
    def writer(kind):
        def write(model, path, *rest):
            if kind == interrupted_at:
                raise KeyboardInterrupt
            Path(path).write_text(f"new {kind}")
        return write

    monkeypatch.setattr(onnx_export, "export_encoder", writer("encoder"))
    monkeypatch.setattr(onnx_export, "export_decoder_step", writer("decoder"))
    monkeypatch.setattr(onnx_export, "quantize_int8", lambda source, target, external: writer("int8")(None, target))


def test_an_overwritten_onnx_export_is_a_fresh_one_even_when_interrupted(models, tmp_path, monkeypatch):
    quick_onnx_graphs(monkeypatch)
    run_script("export_onnx", "--model", models["bilingual"], "--output_dir", tmp_path / "fresh", "--no_int8")
    old = tmp_path / "old"
    run_script("export_onnx", "--model", models["bilingual"], "--output_dir", old)  # int8 graphs too
    for graph in old.glob("*.onnx"):
        graph.write_text("old graph")
    before = folder_contents(old)
    quick_onnx_graphs(monkeypatch, interrupted_at="decoder")
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C after the new encoder graph was written
        run_script("export_onnx", "--model", models["bilingual"], "--output_dir", old, "--overwrite_output_dir",
                   "--no_int8")
    assert folder_contents(old) == before, "the old export, whole: no new graph beside old ones"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fresh", "old"], "no staging folder left"
    quick_onnx_graphs(monkeypatch)
    run_script("export_onnx", "--model", models["bilingual"], "--output_dir", old, "--overwrite_output_dir",
               "--no_int8")
    assert folder_contents(old).keys() == folder_contents(tmp_path / "fresh").keys()  # no int8 graphs left
    assert json.loads((old / onnx_export.INFO_FILE).read_text())["graphs"].keys() == {"float32"}


def test_an_interrupted_ctranslate2_overwrite_keeps_the_old_export(models, tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(models["bilingual"])
    model = save_model(tmp_path / "residual", tokenizer, ["en-de"], ResidualTransformerConfig)
    run_script("export_ctranslate2", "--model", model, "--output_dir", tmp_path / "ct2")
    before = folder_contents(tmp_path / "ct2")

    def interrupted(spec, output_dir):  # Ctrl-C while the new model is written
        Path(output_dir, "model.bin").write_bytes(b"half a model")
        raise KeyboardInterrupt

    monkeypatch.setattr(model_spec.ModelSpec, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_script("export_ctranslate2", "--model", model, "--output_dir", tmp_path / "ct2", "--overwrite_output_dir")
    assert folder_contents(tmp_path / "ct2") == before


def test_an_overwritten_synthetic_corpus_holds_no_file_of_the_old_one(tmp_path):
    small = ["--train_pairs", "20", "--validation_pairs", "0", "--vocabulary_size", "100"]
    run_script("make_synthetic_corpus", "--output_dir", tmp_path / "corpus", *small, "--formats", "text", "jsonl")
    run_script("make_synthetic_corpus", "--output_dir", tmp_path / "fresh", *small, "--seed", "1")
    run_script("make_synthetic_corpus", "--output_dir", tmp_path / "corpus", *small, "--seed", "1",
               "--overwrite_output_dir")
    assert not (tmp_path / "corpus" / "train.jsonl.gz").exists(), "the readers prefer it to train.{en,de}.gz"
    fresh = folder_contents(tmp_path / "fresh")
    assert folder_contents(tmp_path / "corpus").keys() == fresh.keys()
    assert load_parallel_corpus(tmp_path / "corpus", "en", "de")[:] == load_parallel_corpus(tmp_path / "fresh", "en",
                                                                                            "de")[:]


def test_a_model_pushed_or_saved_over_another_carries_none_of_its_files(models, tmp_path):
    """Model A with a shortlist, then model B without one, pushed to one Hub repository and saved into one folder:
    A's shortlist.safetensors is gone both times (B would decode over A's table)."""
    tokenizer = AutoTokenizer.from_pretrained(models["bilingual"])
    with_shortlist, without = load_saved_model(models["bilingual"]), load_saved_model(models["bilingual"])
    vocabulary = with_shortlist.config.vocab_size
    with_shortlist.shortlist = Shortlist(torch.zeros(vocabulary, 1, dtype=torch.long), torch.arange(4))
    with LoopbackHub() as hub:
        for model in (with_shortlist, without):
            push_translation_model(model, tokenizer, "user/model", "card", endpoint=hub.endpoint, token="t")
            assert (SHORTLIST_FILE in hub.repos["user/model"]) == (model is with_shortlist)
    for model in (with_shortlist, without):
        model.save_pretrained(tmp_path / "model")
    assert AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "model").shortlist is None


def tiny_training(tmp_path: Path, output_dir: Path, **training) -> tuple:
    """A one-step training run of a tiny model on two pairs (its tokenizer and data made once under `tmp_path`)."""
    data = tmp_path / "data"
    if not data.exists():
        write_pair(data, "a man .\ntwo dogs .\n", "ein mann .\nzwei hunde .\n", "train")
        train_joint_bpe_tokenizer(["a man .", "two dogs .", "ein mann .", "zwei hunde ."],
                                  vocab_size=60).save_pretrained(tmp_path / "tokenizer")
        (tmp_path / "tiny.json").write_text(json.dumps({"model_type": "dwlstm", "d_model": 16, "ffn_dim": 16,
                                                        "encoder_layers": 1, "decoder_layers": 1,
                                                        "encoder_attention_heads": 2, "decoder_attention_heads": 2}))
    return (ModelArguments(str(tmp_path / "tiny.json"), str(tmp_path / "tokenizer")),
            DataArguments(dataset=str(data), source_lang="en", target_lang="de"),
            TranslationTrainingArguments(output_dir=str(output_dir), **{"max_steps": 1, "use_cpu": True, **training}))


def test_training_over_an_old_run_leaves_nothing_of_it_even_when_interrupted(models, tmp_path, monkeypatch):
    train_translation(*tiny_training(tmp_path, tmp_path / "fresh"))
    run = tmp_path / "run"
    shutil.copytree(models["bilingual"], run)  # an old run's final model, its evaluation and a checkpoint
    write_pair(run / "test", "old hypothesis\n", "", "hypotheses")
    shutil.copytree(models["bilingual"], run / "checkpoint-9")
    (run / "checkpoint-9" / "trainer_state.json").write_text("{}")
    monkeypatch.setattr(Seq2SeqTrainer, "train", lambda *args, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C as training starts: the old final model must not stay
        train_translation(*tiny_training(tmp_path, run, overwrite_output_dir=True))
    assert not (run / "model.safetensors").exists() and not (run / "test").exists()
    monkeypatch.undo()
    shutil.copytree(models["bilingual"], run, dirs_exist_ok=True)
    train_translation(*tiny_training(tmp_path, run, overwrite_output_dir=True))
    assert folder_contents(run).keys() == folder_contents(tmp_path / "fresh").keys()


def test_overwriting_refuses_to_empty_a_folder_of_other_runs_or_inputs(models, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    shutil.copytree(models["bilingual"], runs / "other-run")
    with pytest.raises(ValueError, match=r"--overwrite_output_dir would delete what .*runs holds, and it holds the "
                                         r"saved model\(s\) or run\(s\) other-run: move them out"):
        train_translation(*tiny_training(tmp_path, runs, overwrite_output_dir=True))
    monkeypatch.chdir(runs / "other-run")
    with pytest.raises(ValueError, match="the current folder among it"):
        train_translation(*tiny_training(tmp_path, runs / "other-run", overwrite_output_dir=True))
    assert folder_contents(runs / "other-run") == folder_contents(models["bilingual"])


def test_an_overwritten_evaluation_holds_only_the_new_one(models, tmp_path):
    def evaluate(output_dir, pairs, **settings):
        run_evaluation(evaluation(models["multilingual"], output_dir, data=str(MULTI30K), split="test_2016_flickr",
                                  max_pairs=2, language_pairs=pairs, off_target=False, **settings))

    evaluate(tmp_path / "fresh", "en-fr")
    evaluate(tmp_path / "eval", "en-de,de-en")
    evaluate(tmp_path / "eval", "en-fr", overwrite_output_dir=True)
    assert folder_contents(tmp_path / "eval").keys() == folder_contents(tmp_path / "fresh").keys()
    with pytest.raises(ValueError, match=r"is or holds --model .*, an input of this run"):
        evaluate(models["multilingual"], "en-fr", overwrite_output_dir=True)
    assert (models["multilingual"] / "model.safetensors").is_file()


def test_an_overwritten_analysis_folder_holds_only_the_new_analysis(models, tmp_path):
    def plot_internals(output_dir, *flags):
        run_script("plot_internals", "--model", models["bilingual"], "--data", MULTI30K, "--source_lang", "en",
                   "--target_lang", "de", "--split", "val", "--max_sentences", "2", "--threads", "1", "--output_dir",
                   output_dir, *flags)

    plot_internals(tmp_path / "fresh")
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "gates.json").write_text("{}")  # an earlier analysis's
    plot_internals(tmp_path / "plots", "--overwrite_output_dir")
    assert folder_contents(tmp_path / "plots").keys() == folder_contents(tmp_path / "fresh").keys()
    with pytest.raises(ValueError, match="is or holds --model"):
        plot_internals(models["bilingual"], "--overwrite_output_dir")


# --- What does not fit the model ----------------------------------------------------------------------------------

def test_a_shortlist_of_another_direction_is_refused(models, tmp_path):
    with pytest.raises(ValueError, match=r"--source_lang de --target_lang en: the model translates en-de \(its "
                                         r"config's language_pairs\), not de-en"):
        run_script("build_shortlist", "--model", models["bilingual"], "--data", MULTI30K, "--source_lang", "de",
                   "--target_lang", "en", "--max_pairs", "50", "--output_dir", tmp_path / "wrong")
    assert not (tmp_path / "wrong").exists()
    model = tmp_path / "multilingual"
    shutil.copytree(models["multilingual"], model)
    run_script("build_shortlist", "--model", model, "--data", MULTI30K, "--source_lang", "en", "--target_lang", "de",
               "--max_pairs", "50", "--min_count", "1")
    settings = dict(data=str(MULTI30K), split="test_2016_flickr", max_pairs=2, off_target=False, use_shortlist=True)
    with pytest.raises(ValueError, match=r"--use_shortlist: the model's shortlist was built for en-de .* would "
                                         r"restrict en-fr to en-de's words"):
        run_evaluation(evaluation(model, tmp_path / "eval", language_pairs="en-de,en-fr", **settings))
    with pytest.raises(ValueError, match=r"would restrict de-fr, de-en, en-fr to"):  # the pivot legs too
        run_evaluation(evaluation(model, tmp_path / "eval", language_pairs="de-fr", pivot="en", **settings))
    results = run_evaluation(evaluation(model, tmp_path / "eval", language_pairs="en-de", overwrite_output_dir=True,
                                        **settings))
    assert results["use_shortlist"] is True


def test_the_pipeline_tags_a_many_to_one_models_input_and_refuses_to_guess_a_target(models, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(models["multilingual"])  # tags <2de>, <2en>, <2fr>
    many_to_one = pipeline("translation", model=str(save_model(tmp_path / "m2o", tokenizer, ["de-en", "fr-en"])))
    tag = tokenizer.convert_tokens_to_ids("<2en>")
    assert many_to_one.preprocess("Ein Mann.")["input_ids"][0, 0] == tag
    settings = dict(num_beams=1, max_new_tokens=3)
    assert many_to_one("Ein Mann.", **settings) == many_to_one("Ein Mann.", tgt_lang="en", **settings)
    unknown = pipeline("translation", model=str(save_model(tmp_path / "no-pairs", tokenizer, [])))
    with pytest.raises(ValueError, match=r"reserves the language tags \['de', 'en', 'fr'\].*Pass tgt_lang"):
        unknown("Ein Mann.", **settings)


# --- Input dropped, doubled or replaced: never without a word -----------------------------------------------------

@contextlib.contextmanager
def at_most(seconds: int):
    """A hang becomes a failure (SIGALRM; the tests run in the main thread)."""
    def stop(*_):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_streaming_logs_the_pairs_it_drops_and_stops_when_it_can_keep_none(tmp_path, caplog):
    model_args, data_args, training_args = tiny_training(tmp_path, tmp_path / "run", max_steps=2)
    long_pair = " ".join(["word"] * 3000)
    write_pair(tmp_path / "data", f"a man .\n{long_pair}\ntwo dogs .\n", f"ein mann .\n{long_pair}\nzwei hunde .\n",
               "train")
    streamed = dataclasses.replace(data_args, streaming=True, stream_buffer_pairs=3)
    with caplog.at_level(logging.INFO, logger="nmt_toolkit.streaming"):
        train_translation(model_args, streamed, training_args)
    assert "dropped 1 of 3 pairs longer than 256 tokens on a side" in caplog.text
    training_args = dataclasses.replace(training_args, output_dir=str(tmp_path / "run-2"))
    with at_most(120), pytest.raises(ValueError, match=r"Every one of the (stream's|first) 3 pairs .* longer than "
                                                        r"--max_length 3 tokens on a side.*raise --max_length"):
        train_translation(model_args, dataclasses.replace(streamed, max_length=3), training_args)


def test_a_pair_folder_beside_the_same_languages_files_is_refused(tmp_path):
    corpus = write_pair(tmp_path / "m30k", "a man .\n", "ein mann .\n", "train")
    write_pair(corpus / "de-en", "other .\nmore .\n", "andere .\nmehr .\n", "train")
    with pytest.raises(ValueError, match=r"m30k holds both train.en, train.de and a pair folder de-en/ for the same "
                                         r"languages: move one of them away, or pass .*m30k/de-en itself"):
        load_parallel_corpus(corpus, "en", "de")
    assert len(load_parallel_corpus(corpus / "de-en", "de", "en")) == 2


def test_a_direction_of_one_source_given_twice_is_refused(tmp_path, monkeypatch):
    corpus = write_pair(tmp_path / "m30k", "a man .\n", "ein mann .\n", "train")
    monkeypatch.chdir(tmp_path)
    for more in (["m30k=en-de"], ["./m30k/=de-en,en-de"], ["m30k=de-en", "m30k=all"]):
        with pytest.raises(ValueError, match=r"Directions of one source given more than once \(--dataset and "
                                             r"--more_datasets together\): (de-en of .*m30k, )?en-de of .*m30k; each would be "
                                             r"read twice"):
            parse_sources("m30k", "en-de", more)
    with pytest.raises(ValueError, match="Directions of one source given more than once"):
        run_script("train_tokenizer", "--dataset", corpus, "--language_pairs", "en-de", "--more_datasets",
                   f"{corpus}=en-de", "--output_dir", tmp_path / "tokenizer")
    assert len(parse_sources("m30k", "en-de", ["m30k=de-en", "opus100=en-de"])) == 3  # more data for en-de


# --- Messages in library terms, or tracebacks ---------------------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    ("language_pairs=en-de", "language_pairs are the run's directions.*give them as --language_pairs"),
    ("forget_gate_bias=1e39", r"`forget_gate_bias` must be a finite number within \+-100"),
    ("forget_gate_bias=-1e39", r"`forget_gate_bias` must be a finite number within \+-100"),
])
def test_config_overrides_that_a_config_cannot_take_are_one_line(overrides, message, tmp_path):
    model_args, data_args, training_args = tiny_training(tmp_path, tmp_path / "run")
    with pytest.raises(ValueError, match=message):
        train_translation(dataclasses.replace(model_args, config_overrides=overrides), data_args, training_args)


def test_a_config_override_of_a_field_that_defaults_to_none_is_applied():
    config = HighwayTransformerConfig(d_model=16, encoder_attention_heads=2, decoder_attention_heads=2)
    apply_config_overrides(config, "sdu_layers=1")  # a TypeError from transformers before (no type to convert to)
    assert config.sdu_layers == 1
    with pytest.raises(ValueError, match="`sdu_layers` must be an integer >= 1, got 'x'"):
        apply_config_overrides(HighwayTransformerConfig(d_model=16, encoder_attention_heads=2,
                                                        decoder_attention_heads=2), "sdu_layers=x")


def test_a_shortlist_that_cannot_be_written_is_one_line(models, tmp_path, monkeypatch):
    flags = ["--model", models["bilingual"], "--data", MULTI30K, "--source_lang", "en", "--target_lang", "de",
             "--max_pairs", "20"]
    (tmp_path / "a-file").write_text("")
    code, stderr = run_as_main("build_shortlist", *flags, "--output_dir", tmp_path / "a-file" / "shortlist")
    assert code == 1 and stderr.startswith("error: Cannot write into ") and "a writable folder" in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr

    for reason, message in (("Permission denied (os error 13)", "Cannot write the shortlist "),  # read-only
                            ("No space left on device (os error 28)", "No space left on the device while saving the "
                                                                      "shortlist")):
        def failing(shortlist, path, reason=reason):  # what safetensors raises, half a file written
            Path(path).write_bytes(b"half")
            raise SafetensorError(f"Error while serializing: I/O error: {reason}")

        monkeypatch.setattr(Shortlist, "save", failing)
        code, stderr = run_as_main("build_shortlist", *flags, "--output_dir", tmp_path / "out")
        assert code == 1 and stderr.startswith(f"error: {message}"), stderr
        assert len(stderr.strip().splitlines()) == 1, stderr
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [], "no partial file left"


# --- Unicode: one normal form in training, translation and scoring -------------------------------------------------


def nfd(texts: list[str]) -> list[str]:
    return [unicodedata.normalize("NFD", text) for text in texts]


def test_decomposed_accents_read_as_composed_ones_in_new_tokenizers(models, tmp_path, caplog):
    german = read_multi30k("val", "de", 20)
    assert sum(text != unicodedata.normalize("NFD", text) for text in german) >= 10  # umlauts and ß to decompose
    tokenizer = train_joint_bpe_tokenizer(nfd(read_multi30k("train", "de", 300)), vocab_size=300)
    assert tokenizer(nfd(german))["input_ids"] == tokenizer(german)["input_ids"]  # trained on NFD, read as NFC
    assert "ü" in "".join(tokenizer.get_vocab()) and "\u0308" not in "".join(tokenizer.get_vocab())
    tokenizer.save_pretrained(tmp_path / "new")
    assert normalizes_unicode(AutoTokenizer.from_pretrained(tmp_path / "new"))
    # Scoring compares in NFC too: a decomposed reference matches the composed hypothesis.
    assert score_translations(german, nfd(german))["sacrebleu"] == 100.0

    # A tokenizer saved before keeps its behaviour (no normalizer), and says so when text is not in NFC.
    old = AutoTokenizer.from_pretrained(models["bilingual"])
    old.backend_tokenizer.normalizer = None
    old.save_pretrained(tmp_path / "old")
    old = AutoTokenizer.from_pretrained(tmp_path / "old")
    assert not normalizes_unicode(old) and old(nfd(german))["input_ids"] != old(german)["input_ids"]
    model = load_saved_model(models["bilingual"])
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.data"):
        translate_sentences(model, old, german, num_beams=1, max_new_tokens=2)
        assert "not in Unicode NFC" not in caplog.text
        translate_sentences(model, old, nfd(german), num_beams=1, max_new_tokens=2)
    assert "of 20 sources are not in Unicode NFC" in caplog.text and "train a new tokenizer" in caplog.text
