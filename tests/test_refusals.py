"""Bad input gets one line: a config value, a flag, a file, a folder, a direction or a model that
cannot be used is refused before any work, saying what was wrong and what to do (a script prints it
without a traceback); what can be handled with a caveat (a missing optional package, a few unknown
tokens) is handled and said so.

A new check of an input goes here. Its neighbours: tests/test_data_safety.py (files overwritten,
interrupted, mixed up or damaged) and tests/test_nothing_dropped.py (input that is accepted reaches
the output whole and right)."""

import configparser
import contextlib
import dataclasses
import gzip
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import datasets
import huggingface_hub.constants
import pytest
import torch
from conftest import (
    MULTI30K,
    REPOSITORY,
    SIX_SENTENCES,
    evaluation,
    multi30k_arguments,
    random_ids,
    read_multi30k,
    run_as_main,
    run_script,
    run_script_file,
    tiny_model,
    tiny_training,
    write_pair,
    write_test_pair,
    write_tiny_training_config,
)
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from modeling_dwlstm import (
    DepthWiseRnnConfig,
    DlclConfig,
    DwLstmConfig,
    DwLstmForConditionalGeneration,
    HighwayTransformerConfig,
    ResidualTransformerConfig,
    TransparentAttentionConfig,
)
from modeling_dwlstm.generation_translation import Shortlist
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit import evaluation as evaluation_module
from nmt_toolkit.checkpoints import (
    average_checkpoints,
    last_checkpoints,
    load_saved_model,
    load_saved_tokenizer,
    record_saved_folder,
    save_pretrained_atomically,
)
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.data import (
    check_unknown_tokens,
    load_parallel_corpus,
    tokenize_pairs,
    train_corpus_tokenizer,
    train_sentence_tokenizer,
)
from nmt_toolkit.evaluation import (
    EvaluationArguments,
    results_table,
    run_evaluation,
    translate_sentences,
)
from nmt_toolkit.files import (
    CHECKSUMS_NAME,
    check_local_or_hub,
    prepare_output_dir,
    read_lines,
    verify_checksums,
)
from nmt_toolkit.hub import check_results_of, push_translation_model
from nmt_toolkit.lab.experiments import StageFailed, load_experiment
from nmt_toolkit.lab.plotting import check_figure_path, read_log_history
from nmt_toolkit.multilingual import corpus_languages, parse_sources
from nmt_toolkit.training import (
    DataArguments,
    ModelArguments,
    TrainingDiverged,
    TranslationTrainingArguments,
    apply_config_overrides,
    parse_training_arguments,
    read_config_file,
    train_translation,
)

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k is not at {MULTI30K}"),
]


@pytest.fixture(scope="module")
def english_only(tmp_path_factory):
    """A tokenizer trained on English alone (German's umlauts and ß are unknown to it) and a
    tiny config."""
    folder = tmp_path_factory.mktemp("english-only")
    train_joint_bpe_tokenizer(read_multi30k("train", "en", 200), vocab_size=300).save_pretrained(
        folder / "tokenizer"
    )
    write_tiny_training_config(folder)
    return folder


def training_arguments(folder: Path, output_dir: Path, config: str = "tiny.json", **data):
    return (
        ModelArguments(str(folder / config), str(folder / "tokenizer")),
        DataArguments(
            dataset=str(MULTI30K),
            source_lang="en",
            target_lang="de",
            max_train_pairs=200,
            max_tokens=400,
            **data,
        ),
        TranslationTrainingArguments(
            output_dir=str(output_dir),
            max_steps=1,
            warmup_steps=0,
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
        ),
    )


@pytest.fixture
def unreachable_hub(monkeypatch):
    # nothing listens there
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(
        datasets, "load_dataset", lambda *args, **kwargs: pytest.fail("asked the Hub")
    )


def a_training_run(folder: Path, seed: int = 1) -> Path:
    """A folder shaped like a training run: checkpoint-2 with its Trainer state and recorded
    arguments."""
    checkpoint = folder / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (checkpoint / "optimizer.pt").write_bytes(b"hours of work")
    (checkpoint / "run_arguments.json").write_text(
        json.dumps({"seed": seed, "learning_rate": 0.001})
    )
    return folder


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A tiny saved en-de model with its tokenizer, checksums and fingerprint."""
    tokenizer = train_joint_bpe_tokenizer(SIX_SENTENCES, vocab_size=80)
    torch.manual_seed(0)
    config = DwLstmConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=16,
        max_position_embeddings=64,
        language_pairs=["en-de"],
    )
    folder = tmp_path_factory.mktemp("model") / "model"
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record_saved_folder(folder)
    return folder


def copy_of(folder: Path, destination: Path) -> Path:
    return Path(shutil.copytree(folder, destination))


@pytest.mark.parametrize(
    "config_class,field,value,message",
    [
        (DwLstmConfig, "lstm_hidden", "gru", "lstm_hidden.*'linear', 'ffn', 'glu'"),
        (DwLstmConfig, "lstm_activation", "relu", "lstm_activation"),
        (DwLstmConfig, "share_gates", "all", "share_gates.*'global', 'per_stack', 'none'"),
        (DwLstmConfig, "share_hidden", "yes", "share_hidden"),
        (DwLstmConfig, "forget_gate_bias", float("inf"), "forget_gate_bias.*finite number"),
        (DwLstmConfig, "forget_gate_bias", "1", "forget_gate_bias.*finite number"),
        (DwLstmConfig, "decoder_merge", "mean", "decoder_merge"),
        (DwLstmConfig, "ffn_dim", 2047, "ffn_dim.*even"),
        (DwLstmConfig, "d_model", 500, "divisible"),
        (DwLstmConfig, "encoder_layers", 0, "encoder_layers"),
        (DwLstmConfig, "decoder_layers", 2.5, "decoder_layers"),
        (DwLstmConfig, "dropout", 1.5, "dropout"),
        (DwLstmConfig, "position_embedding_type", "rotary", "position_embedding_type"),
        (DwLstmConfig, "pad_token_id", 40000, "pad_token_id"),
        (DwLstmConfig, "language_pairs", ["english-german-french"], "language_pairs"),
        (ResidualTransformerConfig, "norm_position", "sandwich", "norm_position.*'post', 'pre'"),
        (ResidualTransformerConfig, "activation_function", "swish2", "activation_function"),
        (HighwayTransformerConfig, "sdu_gate", "relu", "sdu_gate.*'sigmoid', 'tanh'"),
        (
            HighwayTransformerConfig,
            "highway_variant",
            "gated_ffn",
            "highway_variant.*'sdu', 'highway_gate', 'gated_mhdpa'",
        ),
        (HighwayTransformerConfig, "sdu_layers", 0, "sdu_layers.*integer >= 1"),
        (HighwayTransformerConfig, "sdu_layers", 2.0, "sdu_layers.*integer"),
        (HighwayTransformerConfig, "sdu_layers", True, "sdu_layers.*integer"),
        (
            HighwayTransformerConfig,
            "sdu_layers",
            7,
            "at most the deeper stack's 6 layers.*sdu_layers=None",
        ),
        (DepthWiseRnnConfig, "lstm_hidden", "gru", "lstm_hidden.*'linear', 'ffn', 'glu'"),
        (DepthWiseRnnConfig, "lstm_activation", "relu", "lstm_activation"),
        (DepthWiseRnnConfig, "share_hidden", 1, "share_hidden"),
        (DepthWiseRnnConfig, "decoder_merge", "two_lstm", "decoder_merge.*'add', 'concat'"),
        (DepthWiseRnnConfig, "ffn_dim", 2047, "ffn_dim.*even"),
        (DlclConfig, "dlcl_weights", "softmax", "dlcl_weights.*'learned', 'one', 'average'"),
        (DlclConfig, "dlcl_layer_norm", "no", "dlcl_layer_norm"),
        (DlclConfig, "norm_position", "middle", "norm_position"),
        (TransparentAttentionConfig, "norm_position", "none", "norm_position"),
        (TransparentAttentionConfig, "encoder_layers", -1, "encoder_layers"),
    ],
)
def test_bad_config_value_names_the_field(config_class, field, value, message):
    with pytest.raises(ValueError, match=message):
        config_class(**{field: value})


def test_misspelled_field_is_not_silently_ignored():
    with pytest.raises(ValueError, match="did you mean `share_gates`"):
        DwLstmConfig(share_gate="none")
    with pytest.raises(ValueError, match="did you mean `sdu_layers`"):
        HighwayTransformerConfig(sdu_layer=2)


@pytest.mark.parametrize("variant", ["highway_gate", "gated_mhdpa"])
def test_highway_variants_refuse_a_tanh_gate(variant):
    with pytest.raises(
        ValueError, match=f"sdu_gate='tanh'.*highway_variant='sdu' only.*{variant!r}.*Eq. 26"
    ):
        HighwayTransformerConfig(highway_variant=variant, sdu_gate="tanh")


def test_checkpoint_of_another_member_is_refused(tmp_path):
    tiny_model("residual-post").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="'dwlstm-residual' model"):
        DwLstmForConditionalGeneration.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "inputs,message",
    [
        (dict(input_ids=torch.tensor([[3, 4, 99]])), "vocab_size=40"),
        (dict(input_ids=torch.tensor([[3, -4, 5]])), "vocab_size=40"),
        (dict(input_ids=torch.tensor([3, 4, 5])), r"shape \(batch, length\)"),
        (
            dict(input_ids=random_ids(2, 5), attention_mask=torch.ones(2, 4)),
            r"attention_mask must have shape \(batch, length\) = \(2, 5\)",
        ),
        (dict(input_ids=random_ids(2, 5), inputs_embeds=torch.zeros(2, 5, 16)), "exactly one of"),
        (
            dict(
                input_ids=random_ids(2, 5),
                labels=random_ids(2, 4),
                decoder_input_ids=random_ids(2, 3),
            ),
            "labels have shape",
        ),
        (dict(input_ids=random_ids(1, 65)), "max_position_embeddings=64"),
        (dict(input_ids=random_ids(2, 5), decoder_input_ids=random_ids(3, 2)), "batch"),
        (dict(input_ids=random_ids(2, 5)), "decoder_input_ids"),
    ],
)
def test_bad_inputs_raise_clear_errors(inputs, message):
    with pytest.raises(ValueError, match=message):
        tiny_model("dwlstm")(**inputs)


def test_the_train_extra_installs_the_language_identifier():
    setup = configparser.ConfigParser()
    setup.read(REPOSITORY / "setup.cfg")
    assert "py3langid" in setup["options.extras_require"]["train"]


def test_multilingual_evaluation_without_py3langid_skips_off_target_rates_and_says_so(
    models, tmp_path, monkeypatch, caplog
):
    monkeypatch.setitem(sys.modules, "py3langid", None)  # as on an install without it
    monkeypatch.setitem(sys.modules, "py3langid.langid", None)
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.evaluation"):
        results = run_evaluation(
            evaluation(
                models["multilingual"],
                tmp_path / "eval",
                data=str(MULTI30K),
                split="test_2016_flickr",
                max_pairs=2,
                language_pairs="en-de,de-en",
            )
        )
    assert "Off-target rates need py3langid" in caplog.text and "skipped" in caplog.text
    assert "py3langid" in results["off_target_skipped"] and results["language_id"] is None
    assert all(scores["off_target_rate"] is None for scores in results["directions"].values())
    assert (
        json.loads((tmp_path / "eval" / "results.json").read_text())["off_target_skipped"]
        == results["off_target_skipped"]
    )


def test_max_pairs_still_checks_that_the_files_have_the_same_number_of_lines(models, tmp_path):
    folder = write_pair(
        tmp_path / "data",
        "a man .\ntwo dogs .\na cat .\n",
        "EXTRA LINE\nein mann .\nzwei hunde .\neine katze .\n",
    )
    with pytest.raises(ValueError, match="Line counts differ: .*test.en ends before line 4"):
        load_parallel_corpus(folder, "en", "de", "test", max_pairs=2)
    with pytest.raises(ValueError, match="Line counts differ"):
        run_evaluation(
            evaluation(
                models["bilingual"],
                tmp_path / "eval",
                data=str(folder),
                split="test",
                source_lang="en",
                target_lang="de",
                max_pairs=2,
            )
        )
    assert not (tmp_path / "eval" / "results.json").exists()


def test_training_with_max_train_pairs_still_checks_the_line_counts(tmp_path):
    folder = write_pair(
        tmp_path / "data", "a man .\ntwo dogs .\n", "EXTRA\nein mann .\nzwei hunde .\n", "train"
    )
    tokenizer = train_joint_bpe_tokenizer(
        ["a man .", "two dogs .", "EXTRA", "ein mann .", "zwei hunde ."], vocab_size=60
    )
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    write_tiny_training_config(tmp_path)
    arguments = (
        ModelArguments(str(tmp_path / "tiny.json"), str(tmp_path / "tokenizer")),
        DataArguments(dataset=str(folder), source_lang="en", target_lang="de", max_train_pairs=1),
        TranslationTrainingArguments(output_dir=str(tmp_path / "run"), max_steps=1, use_cpu=True),
    )
    with pytest.raises(ValueError, match="Line counts differ: .*train.en ends before line 3"):
        train_translation(*arguments)


@pytest.mark.parametrize("reader", ["read_lines", "folder", "evaluation"])
def test_lone_carriage_return_line_ends_are_refused(reader, models, tmp_path):
    folder = write_pair(
        tmp_path / "data",
        "a man .\rtwo dogs .\ra cat .\r",
        "ein mann .\rzwei hunde .\reine katze .\r",
    )
    with pytest.raises(
        ValueError, match=r"test.(en|de): its lines end in lone carriage returns .*tr '\\r' '\\n'"
    ):
        if reader == "read_lines":
            read_lines(folder / "test.de")
        elif reader == "folder":
            load_parallel_corpus(folder, "en", "de", "test", max_pairs=1)
        else:
            run_evaluation(
                evaluation(
                    models["bilingual"],
                    tmp_path / "eval",
                    source_file=str(folder / "test.en"),
                    reference_file=str(folder / "test.de"),
                    target_lang="de",
                )
            )
    assert read_lines(write_pair(tmp_path / "ok", "one\rinside\n", "eins\n") / "test.en") == [
        "one\rinside"
    ]


def test_empty_references_are_named_in_a_warning(models, tmp_path, caplog):
    folder = write_pair(tmp_path / "data", "a man .\ntwo dogs .\na cat .\n", "ein mann .\n\n \n")
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.evaluation"):
        run_evaluation(
            evaluation(
                models["bilingual"],
                tmp_path / "eval",
                source_file=str(folder / "test.en"),
                reference_file=str(folder / "test.de"),
                source_lang="en",
                target_lang="de",
            )
        )
    assert "2 empty reference line(s) (the first: line 2)" in caplog.text


@pytest.mark.parametrize(
    "model, settings, message",
    [
        (
            "multilingual",
            {"language_pairs": "en-cs"},
            r"no tag <2cs> for the direction en-cs: it translates into "
            r"\['de', 'en', 'fr'\]",
        ),
        (
            "multilingual",
            {"language_pairs": "cs-de"},
            r"does not know the source language of cs-de",
        ),
        (
            "bilingual",
            {"language_pairs": "en-de"},
            r"no language tags .* bilingual model \(en-de\)\. Evaluate it with "
            r"--source_lang and --target_lang",
        ),
        (
            "multilingual",
            {"source_lang": "en", "target_lang": "de"},
            r"reserves the language tags .*<2de>.* Evaluate it "
            r"with --add_language_tag, or with --language_pairs "
            r"en-de",
        ),
        (
            "multilingual",
            {"source_lang": "en", "target_lang": "cs", "add_language_tag": True},
            r"no tag <2cs>",
        ),
    ],
)
def test_directions_the_model_cannot_be_asked_for_are_refused_before_decoding(
    models, model, settings, message, tmp_path, monkeypatch
):
    monkeypatch.setattr(
        evaluation_module, "translate_sentences", lambda *args, **kwargs: pytest.fail("decoded")
    )
    with pytest.raises(ValueError, match=message):
        run_evaluation(
            evaluation(
                models[model],
                tmp_path / "eval",
                data=str(MULTI30K),
                split="test_2016_flickr",
                max_pairs=2,
                **settings,
            )
        )
    assert not (tmp_path / "eval" / "results.json").exists()


def test_the_layer_analysis_refuses_a_model_trained_with_tags(models, tmp_path):
    with pytest.raises(
        ValueError, match=r"was trained with language tags .*<2de>.* Analyse a bilingual model"
    ):
        run_script(
            "analyze_layers",
            "--model",
            models["multilingual"],
            "--data",
            MULTI30K,
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--split",
            "test_2016_flickr",
            "--fit_steps",
            1,
            "--max_sentences",
            2,
            "--output_dir",
            tmp_path / "layers",
        )


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"length_penalty": float("nan")}, "--length_penalty must be a finite number, got nan"),
        ({"max_pairs": -1}, "--max_pairs must be a positive integer, got -1"),
        ({"max_pairs": 0}, "--max_pairs must be a positive integer, got 0"),
        ({"num_beams": 0}, "--num_beams must be a positive integer, got 0"),
        ({"max_new_tokens": 0}, "--max_new_tokens must be a positive integer, got 0"),
        ({"max_tokens": -4}, "--max_tokens must be a positive integer, got -4"),
        ({"bootstrap_samples": 0}, "--bootstrap_samples must be a positive integer, got 0"),
        ({"device": "gpu"}, "--device 'gpu' is not a device name: use cpu, cuda"),
        (
            {"device": "cuda:0"},
            r"--device cuda:0: PyTorch sees no cuda device on this machine .*use --device cpu",
        ),
    ],
)
def test_evaluation_numbers_and_devices_are_checked_before_any_work(
    models, settings, message, tmp_path, monkeypatch
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    folder = write_pair(tmp_path / "data", "a man .\ntwo dogs .\n", "ein mann .\nzwei hunde .\n")
    arguments = {"num_beams": 1, "max_new_tokens": 3, **settings}
    with pytest.raises(ValueError, match=message):
        run_evaluation(
            EvaluationArguments(
                model=str(models["bilingual"]),
                output_dir=str(tmp_path / "eval"),
                source_file=str(folder / "test.en"),
                reference_file=str(folder / "test.de"),
                target_lang="de",
                **arguments,
            )
        )
    assert not (tmp_path / "eval").exists()


def test_translate_sentences_checks_its_decoding_settings(models):
    model, tokenizer = load_saved_model(models["bilingual"]), None
    for settings, message in (
        ({"num_beams": 0}, "--num_beams"),
        ({"length_penalty": float("inf")}, "--length_penalty"),
        ({"max_new_tokens": 0}, "--max_new_tokens"),
    ):
        with pytest.raises(ValueError, match=f"{message} must be"):
            translate_sentences(model, tokenizer, ["a man ."], **settings)


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--max_steps", "0"],
            "--max_steps must be a positive number of updates, or -1 to train for "
            "--num_train_epochs",
        ),
        (["--max_steps", "-5"], "--max_steps must be a positive number of updates, or -1"),
        (
            ["--max_steps", "-1", "--num_train_epochs", "0"],
            "--num_train_epochs must be a positive number",
        ),
        (
            ["--gradient_accumulation_steps", "0"],
            "--gradient_accumulation_steps must be a positive integer, got 0",
        ),
        (
            ["--per_device_train_batch_size", "64"],
            "batches are made by token count here: --per_device_train_batch_size",
        ),
        (["--auto_find_batch_size"], "--auto_find_batch_size have no effect. Set --max_tokens"),
        (
            ["--per_device_eval_batch_size", "0"],
            "--per_device_eval_batch_size must be a positive integer",
        ),
        (["--save_steps", "0"], "--save_steps must be a positive number"),
        (["--max_grad_norm", "-1"], "--max_grad_norm must be at least 0"),
        (["--generation_num_beams", "0"], "--generation_num_beams must be a positive integer"),
        (["--max_tokens", "0"], "--max_tokens must be a positive integer, got 0"),
        (["--max_length", "-1"], "--max_length must be a positive integer"),
        (
            ["--target_tokens_per_update", "0"],
            "--target_tokens_per_update must be a positive integer, got 0",
        ),
        (["--max_train_pairs", "-1"], "--max_train_pairs must be a positive integer, got -1"),
        (["--max_validation_pairs", "0"], "--max_validation_pairs must be a positive integer"),
        (["--sampling_temperature", "0"], "--sampling_temperature must be a positive number"),
        (["--max_unknown_share", "nan"], "--max_unknown_share must be a finite number"),
    ],
)
def test_training_numbers_are_refused_when_parsed(flags, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        parse_training_arguments(
            [
                "--model_name_or_path",
                "m.json",
                "--dataset",
                "d",
                "--output_dir",
                str(tmp_path / "run"),
                *flags,
            ]
        )
    assert not (tmp_path / "run").exists()


def test_training_refuses_a_tokenizer_that_cannot_spell_the_target_language(english_only, tmp_path):
    with pytest.raises(
        ValueError,
        match=r"\d\.\d% of the de \(target\) tokens of the en-de training pairs are <unk> "
        r"\([\d,]+ of [\d,]+\): the tokenizer cannot spell this language.*"
        r"--max_unknown_share 1 to train anyway",
    ):
        train_translation(*training_arguments(english_only, tmp_path / "run"))
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_a_few_unknown_tokens_are_a_warning(english_only, caplog):

    tokenizer = AutoTokenizer.from_pretrained(english_only / "tokenizer")
    pairs = tokenize_pairs(
        load_parallel_corpus(MULTI30K, "en", "de", max_pairs=50), tokenizer, "en", "de"
    )
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.data"):
        check_unknown_tokens(pairs, tokenizer, limit=1.0, languages=("en", "de"))
    assert "of the de (target) tokens of the en-de training pairs are <unk>" in caplog.text
    assert "of the en (source)" not in caplog.text
    ok = train_corpus_tokenizer(
        [load_parallel_corpus(MULTI30K, "en", "de", max_pairs=50)], ["en", "de"], merges=50
    )
    check_unknown_tokens(
        tokenize_pairs(load_parallel_corpus(MULTI30K, "en", "de", max_pairs=50), ok, "en", "de"), ok
    )


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"model_type": "dwlstm",, "d_model": 16}',
            r"Config file \S+broken.json is not valid JSON \(Expecting",
        ),
        (
            '{"model_type": "dwlsmt"}',
            r"broken.json: model_type 'dwlsmt' is not a known model type \(did you mean "
            r"'dwlstm'\?\); this family's types: \['dwlstm', 'dwlstm-residual'",
        ),
    ],
)
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


def test_a_mistyped_local_path_shaped_like_a_hub_id_is_answered_at_once(unreachable_hub, tmp_path):
    started = time.monotonic()
    with pytest.raises(
        ValueError,
        match=r"--model rnus/dwlstm: no such local folder, and the Hub "
        r"\(http://127.0.0.1:9\) cannot be reached .*Check the path, or the network",
    ):
        run_evaluation(
            EvaluationArguments(
                model="rnus/dwlstm",
                output_dir=str(tmp_path / "eval"),
                data=str(MULTI30K),
                split="test_2016_flickr",
                source_lang="en",
                target_lang="de",
                max_pairs=1,
            )
        )
    with pytest.raises(
        ValueError,
        match=r"The corpus dat/multi30k: no such local folder, and the Hub "
        r"\(http://127.0.0.1:9\) cannot be reached",
    ):
        load_parallel_corpus("dat/multi30k", "en", "de")
    assert time.monotonic() - started < 20


def test_a_corpus_path_that_does_not_exist_is_not_looked_up_on_the_hub(monkeypatch):
    monkeypatch.setattr(
        datasets, "load_dataset", lambda *args, **kwargs: pytest.fail("asked the Hub")
    )
    for path in ("data/multi30k/typo", "./m30k", "~/corpora/m30k"):
        with pytest.raises(ValueError, match=f"{path}: no such folder or file"):
            load_parallel_corpus(path, "en", "de")


def test_pushing_without_a_network_is_one_clear_error(models):
    model = load_saved_model(models["bilingual"])
    with pytest.raises(
        ValueError,
        match=r"Cannot push user/model to the Hub at http://127.0.0.1:9: .*Check the "
        r"network, HF_ENDPOINT and the login",
    ):
        push_translation_model(
            model, None, "user/model", "card", token="hf_unused", endpoint="http://127.0.0.1:9"
        )


@pytest.mark.parametrize(
    "name, flags, message",
    [
        (
            "analyze_layers",
            ["--num_beams", "0"],
            "argument --num_beams: must be a positive integer, got '0'",
        ),
        (
            "analyze_layers",
            ["--fit_steps", "-3"],
            "argument --fit_steps: must be a positive integer",
        ),
        (
            "analyze_layers",
            ["--device", "gpu"],
            "argument --device: 'gpu' is not a device name: use cpu, cuda",
        ),
        (
            "plot_internals",
            ["--batch_size", "0"],
            "argument --batch_size: must be a positive integer",
        ),
        ("plot_internals", ["--threads", "0"], "argument --threads: must be a positive integer"),
        ("diagnose_depth", ["--steps", "0"], "argument --steps: must be a positive integer"),
        (
            "diagnose_depth",
            ["--learning_rate", "nan"],
            "argument --learning_rate: must be a finite number",
        ),
        (
            "diagnose_depth",
            ["--warmup_steps", "-1"],
            "argument --warmup_steps: must be zero or a positive integer",
        ),
        ("measure_speed", ["--threads", "0"], "argument --threads: must be a positive integer"),
        ("measure_speed", ["--repeats", "0"], "argument --repeats: must be a positive integer"),
        ("quickstart", ["--max_steps", "0"], "argument --max_steps: must be a positive integer"),
        ("quickstart", ["--threads", "0"], "argument --threads: must be a positive integer"),
        ("run_experiments", ["--threads", "0"], "argument --threads: must be a positive integer"),
        (
            "measure_gradient_norms",
            ["--steps", "0"],
            "argument --steps: must be a positive integer",
        ),
        (
            "train_tokenizer",
            ["--model_max_length", "0"],
            "argument --model_max_length: must be a positive integer",
        ),
    ],
)
def test_script_counts_and_devices_are_usage_errors(name, flags, message, tmp_path):
    required = {
        "analyze_layers": [
            "--model",
            "m",
            "--data",
            "d",
            "--source_lang",
            "en",
            "--target_lang",
            "de",
        ],
        "plot_internals": ["--model", "m"],
        "diagnose_depth": ["--data", "d", "--tokenizer", "t", "--configs", "c.json"],
        "run_experiments": ["e.json"],
        "train_tokenizer": ["--dataset", "d", "--source_lang", "en", "--target_lang", "de"],
    }.get(name, [])
    output = (
        ["--output_dir", tmp_path / "out"]
        if name not in ("measure_speed", "run_experiments", "measure_gradient_norms")
        else []
    )
    code, stderr = run_as_main(name, *required, *output, *flags)
    assert code == 2 and message in stderr, stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name, argv, message",
    [
        (
            "results_table",
            ["missing/results.json"],
            "error: Cannot read evaluation results from missing/results.json",
        ),
        (
            "plot_training",
            ["missing-run", "--output", "x.png"],
            "error: missing-run has neither trainer_state.json",
        ),
        ("run_experiments", ["missing.json"], "error: No experiment file missing.json"),
        (
            "measure_speed",
            ["--members", "no-such-member"],
            "error: Unknown members ['no-such-member']",
        ),
        (
            "make_hub_configs",
            ["--output_dir", "a-file/configs"],
            "error: [Errno 20] Not a directory",
        ),
        (
            "push_to_hub",
            ["--model", "missing/model/folder", "--repo_id", "u/m", "--training_data", "x"],
            "error: --model missing/model/folder: no such folder",
        ),
        (
            "measure_gradient_norms",
            ["--data_dir", "missing/data/folder", "--steps", "1"],
            "error: missing/data/folder: no such folder or file",
        ),
    ],
)
def test_scripts_end_in_one_line_without_a_traceback(name, argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    code, stderr = run_as_main(name, *argv)
    assert code == 1 and stderr.strip().splitlines()[-1].startswith(message), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def test_a_missing_optional_package_and_a_failed_campaign_stage_are_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trainer_state.json").write_text(
        json.dumps({"log_history": [{"step": 1, "loss": 2.0}]})
    )
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, stderr = run_as_main("plot_training", "run", "--output", "curves.png")
    assert (
        code == 1 and stderr.strip() == 'error: Plotting needs matplotlib: pip install -e ".[plot]"'
    ), stderr

    def failing_stage():
        raise StageFailed("training failed (exit 1); its log is runs/x/train.log.")

    with (
        contextlib.redirect_stderr(io.StringIO()) as stderr,
        pytest.raises(SystemExit) as exit_info,
    ):
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
    code, stderr = run_as_main(
        "push_to_hub",
        "--model",
        models["bilingual"],
        "--repo_id",
        "user/model",
        "--training_data",
        "Multi30k",
        "--token",
        "hf_unused",
    )
    assert code == 1 and stderr.strip().splitlines()[-1].startswith(
        "error: Cannot push user/model to the Hub"
    )
    assert "Traceback" not in stderr, stderr


def test_evaluation_into_a_closed_pipe_ends_without_a_traceback(models, tmp_path):
    """`evaluate_translation.py ... | head -1`: the reader has gone when the results are printed."""
    folder = write_pair(tmp_path / "data", "a man .\n", "ein mann .\n")
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPOSITORY)}
    process = subprocess.Popen(
        [
            sys.executable,
            str(REPOSITORY / "scripts" / "evaluate_translation.py"),
            "--model",
            str(models["bilingual"]),
            "--output_dir",
            str(tmp_path / "eval"),
            "--source_file",
            str(folder / "test.en"),
            "--reference_file",
            str(folder / "test.de"),
            "--num_beams",
            "1",
            "--max_new_tokens",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
    )
    process.stdout.close()  # the reader stops before anything is printed
    stderr = process.stderr.read().decode()
    process.wait(timeout=300)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert process.returncode == 1
    assert (tmp_path / "eval" / "results.json").is_file(), "the results are written all the same"


def test_a_shortlist_of_another_direction_is_refused(models, tmp_path):
    with pytest.raises(
        ValueError,
        match=r"--source_lang de --target_lang en: the model translates en-de \(its "
        r"config's language_pairs\), not de-en",
    ):
        run_script(
            "build_shortlist",
            "--model",
            models["bilingual"],
            "--data",
            MULTI30K,
            "--source_lang",
            "de",
            "--target_lang",
            "en",
            "--max_pairs",
            "50",
            "--output_dir",
            tmp_path / "wrong",
        )
    assert not (tmp_path / "wrong").exists()
    model = tmp_path / "multilingual"
    shutil.copytree(models["multilingual"], model)
    run_script(
        "build_shortlist",
        "--model",
        model,
        "--data",
        MULTI30K,
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--max_pairs",
        "50",
        "--min_count",
        "1",
    )
    settings = dict(
        data=str(MULTI30K),
        split="test_2016_flickr",
        max_pairs=2,
        off_target=False,
        use_shortlist=True,
    )
    with pytest.raises(
        ValueError,
        match=r"--use_shortlist: the model's shortlist was built for en-de .* would "
        r"restrict en-fr to en-de's words",
    ):
        run_evaluation(
            evaluation(model, tmp_path / "eval", language_pairs="en-de,en-fr", **settings)
        )
    # the pivot legs too
    with pytest.raises(ValueError, match=r"would restrict de-fr, de-en, en-fr to"):
        run_evaluation(
            evaluation(model, tmp_path / "eval", language_pairs="de-fr", pivot="en", **settings)
        )
    results = run_evaluation(
        evaluation(
            model, tmp_path / "eval", language_pairs="en-de", overwrite_output_dir=True, **settings
        )
    )
    assert results["use_shortlist"] is True


def test_a_pair_folder_beside_the_same_languages_files_is_refused(tmp_path):
    corpus = write_pair(tmp_path / "m30k", "a man .\n", "ein mann .\n", "train")
    write_pair(corpus / "de-en", "other .\nmore .\n", "andere .\nmehr .\n", "train")
    with pytest.raises(
        ValueError,
        match=r"m30k holds both train.en, train.de and a pair folder de-en/ for the same "
        r"languages: move one of them away, or pass .*m30k/de-en itself",
    ):
        load_parallel_corpus(corpus, "en", "de")
    assert len(load_parallel_corpus(corpus / "de-en", "de", "en")) == 2


def test_a_direction_of_one_source_given_twice_is_refused(tmp_path, monkeypatch):
    corpus = write_pair(tmp_path / "m30k", "a man .\n", "ein mann .\n", "train")
    monkeypatch.chdir(tmp_path)
    for more in (["m30k=en-de"], ["./m30k/=de-en,en-de"], ["m30k=de-en", "m30k=all"]):
        with pytest.raises(
            ValueError,
            match=r"Directions of one source given more than once \(--dataset and "
            r"--more_datasets together\): (de-en of .*m30k, )?en-de of .*m30k; each would be "
            r"read twice",
        ):
            parse_sources("m30k", "en-de", more)
    with pytest.raises(ValueError, match="Directions of one source given more than once"):
        run_script(
            "train_tokenizer",
            "--dataset",
            corpus,
            "--language_pairs",
            "en-de",
            "--more_datasets",
            f"{corpus}=en-de",
            "--output_dir",
            tmp_path / "tokenizer",
        )
    # more data for en-de
    assert len(parse_sources("m30k", "en-de", ["m30k=de-en", "opus100=en-de"])) == 3


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            "language_pairs=en-de",
            "language_pairs are the run's directions.*give them as --language_pairs",
        ),
        ("forget_gate_bias=1e39", r"`forget_gate_bias` must be a finite number within \+-100"),
        ("forget_gate_bias=-1e39", r"`forget_gate_bias` must be a finite number within \+-100"),
    ],
)
def test_config_overrides_that_a_config_cannot_take_are_one_line(overrides, message, tmp_path):
    model_args, data_args, training_args = tiny_training(tmp_path, tmp_path / "run")
    with pytest.raises(ValueError, match=message):
        train_translation(
            dataclasses.replace(model_args, config_overrides=overrides), data_args, training_args
        )


def test_a_broken_link_as_output_folder_is_named(tmp_path):
    (tmp_path / "out").symlink_to(tmp_path / "gone")
    with pytest.raises(
        ValueError,
        match=r"out is a broken symbolic link \(to .*gone, which does not exist\); remove",
    ):
        prepare_output_dir(tmp_path / "out")


def test_read_lines_reads_gzip_and_names_text_that_is_not_utf8(tmp_path):
    (tmp_path / "test.de.gz").write_bytes(gzip.compress(b"ein mann .\nzwei hunde .\n"))
    assert read_lines(tmp_path / "test.de.gz") == ["ein mann .", "zwei hunde ."]
    (tmp_path / "latin1.de").write_bytes("ein bär .\n".encode("latin-1"))
    with pytest.raises(
        ValueError,
        match=r"latin1.de is not UTF-8 text \(invalid .* on line 1\): convert it, e.g. "
        r"iconv -f latin1 -t utf-8",
    ):
        read_lines(tmp_path / "latin1.de")


def test_a_plain_and_a_compressed_file_of_one_language_are_refused(tmp_path):
    folder = write_test_pair(tmp_path / "data")
    (folder / "test.de.gz").write_bytes(gzip.compress(b"alt .\nalt .\n"))
    with pytest.raises(ValueError, match=r"holds both test.de and test.de.gz: keep one of them"):
        load_parallel_corpus(folder, "en", "de", "test")


def test_a_broken_link_in_a_corpus_folder_is_named(tmp_path):
    folder = write_test_pair(tmp_path / "data")
    (folder / "test.de").unlink()
    (folder / "test.de").symlink_to(tmp_path / "moved.de")
    with pytest.raises(
        ValueError,
        match=r"test.de is a broken symbolic link \(to .*moved.de, which does not exist\)",
    ):
        load_parallel_corpus(folder, "en", "de", "test")


def test_a_text_file_given_as_the_corpus_is_named(tmp_path):
    (tmp_path / "train.en").write_text("a man .\n")
    with pytest.raises(
        ValueError,
        match=r"train.en is not a JSON-lines file .*give the folder that holds "
        r"\{split\}.\{lang\}\[.gz\] files",
    ):
        load_parallel_corpus(tmp_path / "train.en", "en", "de")
    (tmp_path / "pairs.jsonl").write_text('{"en": "a", "de": "b"}\nnot json\n')
    with pytest.raises(ValueError, match=r"pairs.jsonl, line 2: not valid JSON"):
        load_parallel_corpus(tmp_path / "pairs.jsonl", "en", "de")


def test_far_fewer_merges_than_asked_are_said(caplog):
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.data"):
        train_sentence_tokenizer(lambda: iter(SIX_SENTENCES), merges=300, min_frequency=1000)
    assert (
        "Only 0 of the 300 merges asked for were learnt" in caplog.text
        and "--min_frequency" in caplog.text
    )


@pytest.mark.parametrize("tool", ["train_tokenizer", "train_translation"])
def test_more_datasets_without_language_pairs_is_refused(tool, tmp_path):
    flags = [
        "--dataset",
        "d",
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--more_datasets",
        "extra=en-de",
        "--output_dir",
        str(tmp_path / "out"),
    ]
    if tool == "train_tokenizer":
        code, stderr = run_as_main("train_tokenizer", *flags)
        assert code == 2 and "--more_datasets adds sources to a multilingual tokenizer" in stderr, (
            stderr
        )
    else:
        with pytest.raises(
            ValueError,
            match=r"--more_datasets adds sources to a multilingual run: pass "
            r"--language_pairs",
        ):
            parse_training_arguments(["--model_name_or_path", "m.json", *flags])
        # multilingual: fine
        DataArguments(dataset="d", language_pairs="en-de", more_datasets=["extra=en-de"])


def test_config_files_with_fields_no_config_reads_are_refused(tmp_path):
    (tmp_path / "tiny.json").write_text(
        json.dumps({"model_type": "dwlstm", "num_layers": 3, "encoder_layer": 2})
    )
    with pytest.raises(
        ValueError,
        match=r"tiny.json: 'encoder_layer' \(did you mean 'encoder_layers'\?\); "
        r"'num_layers'.* are not fields of dwlstm configs",
    ):
        read_config_file(tmp_path / "tiny.json")
    saved = json.loads((REPOSITORY / "hub_configs" / "dwlstm-base-6l.json").read_text())
    (tmp_path / "saved.json").write_text(
        json.dumps(
            {
                **saved,
                "architectures": ["DwLstmForConditionalGeneration"],
                "transformers_version": "5.24.0",
                "hidden_size": 512,
            }
        )
    )
    # a saved config.json, an alias: fine
    assert read_config_file(tmp_path / "saved.json")["d_model"] == 512


def test_a_folder_given_as_a_config_file_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"Config file .* is a folder; give a config JSON file"):
        read_config_file(tmp_path)


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--num_train_epochs", "2"],
            r"--num_train_epochs has no effect while --max_steps is set \(it is 100,000 unless "
            r"given\): pass --max_steps -1 to train for 2 epochs",
        ),
        (["--learning_rate", "nan"], r"--learning_rate must be a positive number, got nan"),
        (["--learning_rate", "-0.001"], r"--learning_rate must be a positive number, got -0.001"),
    ],
)
def test_training_settings_that_would_be_ignored_or_fail_late_are_refused(flags, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        parse_training_arguments(
            [
                "--model_name_or_path",
                "m.json",
                "--dataset",
                "d",
                "--output_dir",
                str(tmp_path / "run"),
                *flags,
            ]
        )


def test_averaging_arguments_are_checked(tmp_path):
    with pytest.raises(
        ValueError, match=r"must be a list of checkpoint folders, got the single path"
    ):
        average_checkpoints(str(tmp_path), tmp_path / "avg")
    with pytest.raises(
        ValueError, match=r"No such checkpoint folder: .*checkpoint-99\. Check the paths"
    ):
        average_checkpoints([tmp_path / "checkpoint-99"], tmp_path / "avg")
    run = a_training_run(tmp_path / "run")
    with pytest.raises(
        ValueError, match=r"checkpoint-2 is a checkpoint, not a run folder: give the run folder"
    ):
        last_checkpoints(run / "checkpoint-2", 1)


def test_average_checkpoints_script_refuses_last_zero(tmp_path):
    code, stderr = run_as_main(
        "average_checkpoints",
        "--run_dir",
        tmp_path,
        "--last",
        "0",
        "--output_dir",
        tmp_path / "avg",
    )
    assert code == 2 and "argument --last: must be a positive integer, got '0'" in stderr


def test_a_run_without_its_final_model_names_its_checkpoints(tmp_path):
    run = a_training_run(tmp_path / "run")
    message = (
        r"is a training run without a final model \(stopped, or still training\): give one of "
        r"its checkpoints"
    )
    with pytest.raises(ValueError, match=message):
        load_saved_model(run)
    with pytest.raises(ValueError, match=message):
        load_saved_tokenizer(run, "--model")


def test_the_source_file_as_its_own_reference_is_refused(model, tmp_path):
    folder = write_test_pair(tmp_path / "data")
    with pytest.raises(
        ValueError,
        match=r"--source_file and --reference_file are the same file .*Give the "
        r"target-language references",
    ):
        run_evaluation(
            EvaluationArguments(
                model=str(model),
                output_dir=str(tmp_path / "eval"),
                source_file=str(folder / "test.en"),
                reference_file=str(folder / "test.en"),
            )
        )


def test_results_of_another_model_are_refused_for_the_card(model, tmp_path):
    folder = write_test_pair(tmp_path / "data")
    results = run_evaluation(
        EvaluationArguments(
            model=str(model),
            output_dir=str(tmp_path / "eval"),
            num_beams=1,
            max_new_tokens=2,
            source_file=str(folder / "test.en"),
            reference_file=str(folder / "test.de"),
            target_lang="de",
        )
    )
    assert len(results["model_weights_sha256"]) == 64
    check_results_of(results, model, "eval/results.json")
    other = tmp_path / "other"
    AutoModelForSeq2SeqLM.from_config(
        AutoModelForSeq2SeqLM.from_pretrained(model).config
    ).save_pretrained(other)
    with pytest.raises(
        ValueError, match=r"--results eval/results.json are the scores of another model"
    ):
        check_results_of(results, other, "eval/results.json")
    # written before: by path
    old = {key: value for key, value in results.items() if key != "model_weights_sha256"}
    with pytest.raises(ValueError, match=r"are the scores of another model"):
        check_results_of(old, other, "eval/results.json")


def test_a_baseline_of_other_directions_is_named():
    system = {"directions": {"en-de": {"sacrebleu": 1.0, "chrf": 2.0}}, "averages": {}}
    baseline = {"directions": {"en-fr": {"sacrebleu": 1.0, "chrf": 2.0}}, "averages": {}}
    with pytest.raises(ValueError, match=r"The baseline has no \['en-de'\] \(it has \['en-fr'\]\)"):
        results_table(system, baseline)


def test_the_layer_analysis_warns_about_a_direction_the_model_was_not_trained_for(
    model, tmp_path, caplog
):
    folder = write_test_pair(
        tmp_path / "data", "a man .\ntwo dogs .\n" * 4, "ein mann .\nzwei hunde .\n" * 4
    )
    (folder / "train.en").write_text((folder / "test.en").read_text())
    (folder / "train.de").write_text((folder / "test.de").read_text())
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.evaluation"):
        run_script(
            "analyze_layers",
            "--model",
            model,
            "--data",
            folder,
            "--source_lang",
            "de",
            "--target_lang",
            "en",
            "--fit_steps",
            1,
            "--fit_batch_size",
            4,
            "--max_sentences",
            2,
            "--num_beams",
            1,
            "--output_dir",
            tmp_path / "layers",
        )
    assert "lists the direction(s) ['en-de'], not de-en" in caplog.text


def test_a_figure_path_must_name_a_picture(tmp_path):
    for path in ("run/trainer_state.json", "curves"):
        with pytest.raises(
            ValueError, match=rf"--output {path}: a figure file name ends in .png, .pdf, .svg"
        ):
            check_figure_path(path)
    assert check_figure_path("curves.PDF") == Path("curves.PDF")


def test_depth_diagnosis_refuses_overrides_no_config_reads(tmp_path):
    (tmp_path / "tiny.json").write_text(json.dumps({"model_type": "dwlstm"}))
    with pytest.raises(
        ValueError,
        match=r"--config_overrides: 'num_layers' \(did you mean 'encoder_layers'\?\) is not "
        r"a field of dwlstm configs",
    ):
        run_script(
            "diagnose_depth",
            "--data",
            tmp_path,
            "--tokenizer",
            tmp_path,
            "--configs",
            tmp_path / "tiny.json",
            "--config_overrides",
            '{"num_layers": 2}',
            "--output_dir",
            tmp_path / "out",
        )
    assert not (tmp_path / "out").exists()


def test_lab_outputs_that_cannot_be_written_are_named_before_the_work(tmp_path, monkeypatch):
    code, stderr = run_as_main(
        "measure_gradient_norms", "--data_dir", tmp_path / "missing", "--output", tmp_path
    )
    assert (
        code == 2 and f"--output {tmp_path} is a folder; give the JSON file to write" in stderr
    ), stderr
    folder = tmp_path / "model"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        # root writes anywhere: the folder is made read-only for the check instead
        if os.access(folder, os.W_OK):
            real_access = os.access
            monkeypatch.setattr(
                os, "access", lambda path, mode: mode != os.W_OK and real_access(path, mode)
            )
        code, stderr = run_as_main("record_checksums", folder)
        assert code == 1 and "cannot be written by this user (permission denied)" in stderr, stderr
    finally:
        folder.chmod(0o755)


def test_a_source_longer_than_the_positions_is_refused_before_decoding_naming_its_line(
    saved_with_checksums, monkeypatch
):
    _, model, tokenizer = saved_with_checksums
    monkeypatch.setattr(
        model, "generate", lambda **kwargs: pytest.fail("decoded before checking the lengths")
    )
    with pytest.raises(
        ValueError,
        match=r"Source line 2 has \d+ tokens, more than the model's max_position_embeddings=12",
    ):
        translate_sentences(
            model, tokenizer, ["a man .", "a man rides a horse . " * 4], num_beams=1
        )


def test_paths_that_look_local_are_not_looked_up_on_the_hub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for typo in ("./my-modle", "runs/typo", str(tmp_path / "absent"), "my-modle", "a/b/c"):
        with pytest.raises(ValueError, match="no such folder"):
            check_local_or_hub(typo, "--model")
    # no probe of the Hub: no network here
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    check_local_or_hub("user/dwlstm-base", "--model")  # a Hub id passes on to transformers
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="config.json is a file; give the folder"):
        load_saved_model(tmp_path / "config.json")


@pytest.mark.parametrize("threads", [0, -2])
def test_threads_must_be_positive(threads, tmp_path):
    with pytest.raises(
        ValueError, match=f"--threads must be a positive number of CPU threads, got {threads}"
    ):
        run_evaluation(
            EvaluationArguments(model="unused", output_dir=str(tmp_path / "out"), threads=threads)
        )
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_folder_missing_files_is_named(saved_with_checksums, tmp_path):
    folder = copy_of(saved_with_checksums[0], tmp_path / "tok")
    (folder / CHECKSUMS_NAME).unlink()
    (folder / "tokenizer.json").unlink()
    with pytest.raises(
        ValueError, match="holds no tokenizer.json: not a complete tokenizer folder"
    ):
        load_saved_tokenizer(folder)
    save_pretrained_atomically(saved_with_checksums[2], tmp_path / "tok2")
    assert verify_checksums(tmp_path / "tok2") and len(
        load_saved_tokenizer(tmp_path / "tok2")
    ) == len(saved_with_checksums[2])


def test_divergence_stops_training_at_once_naming_the_step(multi30k_setup, tmp_path):
    with pytest.raises(
        TrainingDiverged,
        match=r"Training diverged at step 2: the loss is nan .*--learning_rate \(now inf\)",
    ):
        train_translation(
            *multi30k_arguments(
                multi30k_setup, tmp_path, learning_rate=float("inf"), warmup_steps=0
            )
        )
    assert not (tmp_path / "model.safetensors").exists() and not list(tmp_path.glob("checkpoint-*"))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ("d_model=abc", r"d_model='abc' is not a valid int"),
        ("dropout", r"'dropout' is not name=value"),
        ("dropout=0.3,,encoder_layers=2", r"'' is not name=value"),
        ("=3", r"'=3' is not name=value"),
        ("encoder_layer=3", r"dwlstm configs have no field 'encoder_layer'"),
        ("tie_word_embeddings=maybe", r"tie_word_embeddings='maybe' is not a valid bool"),
    ],
)
def test_config_overrides_errors_name_the_bad_item(overrides, message):
    with pytest.raises(ValueError, match=message):
        apply_config_overrides(DwLstmConfig(), overrides)


def test_train_script_exits_non_zero_on_divergence_with_one_line_and_logs_each_step_once(
    multi30k_setup, tmp_path
):
    finished = run_script_file(
        "train_translation.py",
        "--model_name_or_path",
        str(multi30k_setup / "tiny.json"),
        "--tokenizer_name_or_path",
        str(multi30k_setup / "tokenizer"),
        "--dataset",
        str(MULTI30K),
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--max_train_pairs",
        "24",
        "--max_tokens",
        "160",
        "--max_steps",
        "4",
        "--warmup_steps",
        "0",
        "--learning_rate",
        "inf",
        "--logging_steps",
        "1",
        "--use_cpu",
        "--threads",
        "1",
        "--output_dir",
        str(tmp_path / "run"),
    )
    assert finished.returncode == 1, finished.stderr[-2000:]
    assert finished.stderr.strip().splitlines()[-1].startswith("error: Training diverged at step 2")
    assert "Traceback" not in finished.stderr
    assert finished.stderr.count("step 1/4 |") == 1, finished.stderr[-2000:]
    assert "{'loss'" not in finished.stdout + finished.stderr, (
        "the Trainer's dict is not printed besides our line"
    )


def test_generate_refuses_a_shortlist_of_another_direction_than_the_call_translates(models):
    bilingual = AutoModelForSeq2SeqLM.from_pretrained(models["bilingual"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(models["bilingual"])
    size = bilingual.config.vocab_size

    def shortlist(**metadata):
        return Shortlist(torch.arange(size)[:, None], torch.arange(10), metadata)

    source = tokenizer(["a man ."], return_tensors="pt")
    bilingual.shortlist = shortlist(direction="de-en")
    with pytest.raises(
        ValueError,
        match=r"^use_shortlist=True: the model's shortlist was built for de-en, but the "
        r"model translates en-de \(its config's language_pairs\)",
    ):
        bilingual.generate(**source, use_shortlist=True, num_beams=1, max_new_tokens=2)
    # built before the direction was recorded
    bilingual.shortlist = shortlist(corpus="multi30k train en-de")
    assert (
        bilingual.generate(**source, use_shortlist=True, num_beams=1, max_new_tokens=2).shape[0]
        == 1
    )

    multilingual = AutoModelForSeq2SeqLM.from_pretrained(models["multilingual"]).eval()
    multilingual.shortlist = Shortlist(
        torch.arange(multilingual.config.vocab_size)[:, None],
        torch.arange(10),
        {"direction": "en-de"},
    )
    translator = pipeline(
        "translation",
        model=multilingual,
        tokenizer=AutoTokenizer.from_pretrained(models["multilingual"]),
        num_beams=1,
        max_new_tokens=2,
        use_shortlist=True,
    )
    with pytest.raises(
        ValueError,
        match=r"^use_shortlist=True: the model's shortlist was built for en-de and would "
        r"restrict this call's translation into fr \(the tag in front of its "
        r"sources\) to en-de's words",
    ):
        translator("a man .", src_lang="en", tgt_lang="fr")
    assert translator("a man .", src_lang="en", tgt_lang="de")[0]["translation_text"] is not None


def test_the_pipeline_refuses_what_is_not_text_and_a_tag_of_another_target(models, tmp_path):
    bilingual = pipeline(
        "translation",
        model=AutoModelForSeq2SeqLM.from_pretrained(models["bilingual"]),
        tokenizer=AutoTokenizer.from_pretrained(models["bilingual"]),
        num_beams=1,
        max_new_tokens=2,
    )
    for value, name in ((5, "int"), (b"a man .", "bytes")):
        with pytest.raises(
            ValueError, match=f"^The translation pipeline translates a string, .*; got a {name}.$"
        ):
            bilingual(value)
    # a tuple is a list
    assert bilingual(("a man .", "two dogs .")) == bilingual(["a man .", "two dogs ."])

    multilingual = pipeline(
        "translation",
        model=AutoModelForSeq2SeqLM.from_pretrained(models["multilingual"]),
        tokenizer=AutoTokenizer.from_pretrained(models["multilingual"]),
        num_beams=1,
        max_new_tokens=2,
    )
    with pytest.raises(
        ValueError, match=r"^The text starts with the tag <2fr> but tgt_lang is 'de': take the tag"
    ):
        multilingual("<2fr> a man .", tgt_lang="de")
    assert multilingual("<2de> a man .", tgt_lang="de") == multilingual("a man .", tgt_lang="de")
    (tmp_path / "in.jsonl").write_text(
        '{"text": "a man .", "tgt_lang": "de"}\n{"text": "<2fr> a man .", "tgt_lang": "de"}\n'
    )
    code, stderr = run_as_main(
        "translate",
        "--model",
        models["multilingual"],
        "--input",
        tmp_path / "in.jsonl",
        "--json_lines",
        "--output",
        tmp_path / "out.txt",
    )
    assert (code, stderr) == (
        1,
        "error: Source 2 starts with the tag <2fr> but is to be translated into de: take "
        "the tag out of the text (the target language puts its own in front).\n",
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"runs": []}, r"`runs` must be a non-empty list of runs"),
        ({"runs": {"name": "a"}}, r"`runs` must be a non-empty list of runs"),
        ({"training": "fast"}, r"`training` must be a JSON object of settings, got 'fast'"),
        ({"data": "corpus"}, r"`data` must be a JSON object of settings"),
        (
            {"runs": [{"name": "a", "config": "tiny.json", "model": [16]}]},
            r"run 1: `model` must be a JSON object",
        ),
        (
            {"runs": [{"name": "a/b", "config": "tiny.json"}]},
            r"run 1's name 'a/b' must be letters, digits",
        ),
        (
            {"runs": [{"name": "a", "config": "tiny.json", "seeds": [1, 1]}]},
            r"`seeds` \[1, 1\] names a seed twice",
        ),
    ],
)
def test_experiment_files_that_would_fail_late_or_count_a_run_twice_are_refused(
    change, message, tmp_path
):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "tiny.json").write_text('{"model_type": "dwlstm"}')
    spec = {
        "name": "t",
        "data": {"dataset": "corpus", "source_lang": "en", "target_lang": "de"},
        "runs": [{"name": "a", "config": "tiny.json"}],
        **change,
    }
    (tmp_path / "experiment.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=message):
        load_experiment(tmp_path / "experiment.json")


def test_training_into_a_finished_run_says_how_to_continue_or_start_again(multi30k_setup, tmp_path):
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text('{"global_step": 3}')
    (tmp_path / "train_results.json").write_text("{}")
    with pytest.raises(
        ValueError,
        match=r"already holds checkpoints of a run \(checkpoint-3; it finished\)\. Pass "
        r"--resume_from_checkpoint last to continue it with a larger --max_steps, "
        r"--overwrite_output_dir to start again there, or choose another",
    ):
        train_translation(*multi30k_arguments(multi30k_setup, tmp_path))


@pytest.mark.parametrize("new_tokens", [0, -3, 2.5, True])
def test_generate_refuses_a_max_new_tokens_below_one(new_tokens):
    """max_new_tokens=0 gave transformers' message about a max_length of 1 the caller never set."""
    model = tiny_model("dwlstm")
    with pytest.raises(
        ValueError,
        match=r"max_new_tokens must be a whole number of at least 1.*got " + repr(new_tokens),
    ):
        model.generate(torch.tensor([[5, 6, 2]]), max_new_tokens=new_tokens)
