"""The translation metrics as `evaluate` modules (metric_translation.py), the Trainer's
compute_metrics, the Space."""

import json
import os
import subprocess
import sys
import textwrap

import evaluate
import numpy as np
import pytest
import sacrebleu
from conftest import WITHOUT_PACKAGE
from hub_server import LoopbackHub
from transformers import EvalPrediction

from modeling_dwlstm.tokenization_dwlstm import train_joint_bpe_tokenizer
from nmt_toolkit.evaluation import score_translations, tokenize_for_bleu
from nmt_toolkit.metrics import (
    METRIC_SCRIPT,
    load_translation_metric,
    push_translation_metric,
    translation_compute_metrics,
    translation_metric_path,
)

HYPOTHESES = [
    "Ein Mann reitet ein Pferd.",
    "Zwei Hunde spielen im Schnee-Park.",
    "Die Frau liest ein altes Buch .",
]
REFERENCES = [
    "Ein Mann reitet auf einem Pferd.",
    "Zwei Hunde spielen im Schnee-Park!",
    "Die Frau liest ein Buch.",
]

# Prepended to LOAD_AND_SCORE: a process without any network (every connection attempt fails).
NO_NETWORK = textwrap.dedent("""
    import socket

    def refuse(*args, **kwargs):
        raise OSError("no network in this test")

    socket.socket.connect = socket.create_connection = refuse
""")
# In a fresh process: evaluate.load(argv[1]), then score the sentences in argv[2] against those in
# argv[3].
LOAD_AND_SCORE = textwrap.dedent("""
    import json, sys
    import evaluate

    metric = evaluate.load(sys.argv[1])
    print(json.dumps(metric.compute(predictions=json.loads(sys.argv[2]), references=json.loads(sys.argv[3]))))
""")  # noqa: E501


@pytest.fixture(scope="module")
def metric():
    return load_translation_metric()


def test_module_gives_the_numbers_of_score_translations_and_sacrebleu(metric):
    result = metric.compute(predictions=HYPOTHESES, references=REFERENCES)
    # one implementation: every key and value
    assert result == score_translations(HYPOTHESES, REFERENCES)
    assert (
        result["sacrebleu"]
        == round(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score, 2)
        == 53.21
    )
    assert (
        result["chrf"] == round(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score, 2) == 80.71
    )
    tokenized = sacrebleu.corpus_bleu(
        [tokenize_for_bleu(text) for text in HYPOTHESES],
        [[tokenize_for_bleu(text) for text in REFERENCES]],
        tokenize="none",
        force=True,
    )
    assert result["tokenized_bleu"] == round(tokenized.score, 2) == 60.9
    assert result["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|")
    assert (
        metric.name == "translation_metrics"
        and "Post, Matt" in metric.citation
        and "chrF" in metric.description
    )
    assert set(metric.features) == {"predictions", "references"}
    # target_lang reaches sacreBLEU (its tokenizer for Chinese), as in evaluation.py
    chinese = metric.compute(
        predictions=["我们在这里。"], references=["我们在那里。"], target_lang="zh"
    )
    assert "tok:zh" in chinese["sacrebleu_signature"]
    assert chinese == score_translations(["我们在这里。"], ["我们在那里。"], "zh")


@pytest.mark.parametrize(
    "config_name, keys",
    [
        ("sacrebleu", {"sacrebleu", "sacrebleu_signature"}),
        ("tokenized_bleu", {"tokenized_bleu", "tokenized_bleu_method"}),
        ("chrf", {"chrf", "chrf_signature"}),
    ],
)
def test_each_configuration_is_its_part_of_the_scores(config_name, keys):
    result = load_translation_metric(config_name).compute(
        predictions=HYPOTHESES, references=REFERENCES
    )
    expected = score_translations(HYPOTHESES, REFERENCES)
    assert result == {key: expected[key] for key in keys}


def test_combine_joins_the_configurations_and_other_modules():
    combined = evaluate.combine(
        [
            load_translation_metric("sacrebleu"),
            load_translation_metric("tokenized_bleu"),
            load_translation_metric("chrf"),
        ]
    )
    expected = score_translations(HYPOTHESES, REFERENCES)
    result = combined.compute(predictions=HYPOTHESES, references=REFERENCES)
    assert result == {key: expected[key] for key in result} and {
        "sacrebleu",
        "tokenized_bleu",
        "chrf",
    } <= set(result)
    # incremental use, as in a custom evaluation loop
    combined.add_batch(predictions=HYPOTHESES[:2], references=REFERENCES[:2])
    combined.add_batch(predictions=HYPOTHESES[2:], references=REFERENCES[2:])
    assert combined.compute() == result


@pytest.mark.parametrize(
    "predictions, references, message",
    [
        (
            [["Ein Mann reitet ein Pferd."]],
            ["Ein Mann reitet auf einem Pferd."],
            "`predictions` must be a list of strings",
        ),
        (
            HYPOTHESES,
            [[reference] for reference in REFERENCES],
            "`references` must be a list of strings",
        ),
        (
            HYPOTHESES[:2] + [["a list later on"]],
            REFERENCES,
            "`predictions` must be a list of strings",
        ),
        (
            "Ein Mann reitet ein Pferd.",
            "Ein Mann reitet auf einem Pferd.",
            "`predictions` must be a list of strings",
        ),
        (
            HYPOTHESES,
            REFERENCES[:2],
            r"Mismatch in the number of predictions \(3\) and references \(2\)",
        ),
    ],
)
def test_bad_inputs_are_refused_with_a_clear_error(metric, predictions, references, message):
    with pytest.raises(ValueError, match=message):
        metric.compute(predictions=predictions, references=references)


def test_off_target_configuration_identifies_the_output_language():
    metric = load_translation_metric("off_target", keep_in_memory=True)
    german = ["Ein Mann fährt mit dem Fahrrad durch die Stadt.", "Zwei Hunde spielen im Schnee."]
    french = ["Un homme fait du vélo dans la ville.", "Deux chiens jouent dans la neige."]
    result = metric.compute(
        predictions=german + french,
        references=[""] * 4,
        target_lang="de",
        languages=["en", "de", "fr", "cs"],
    )
    assert result == {
        "off_target_rate": 0.5,
        "language_id": "py3langid, restricted to ['cs', 'de', 'en', 'fr']",
    }
    assert (
        metric.compute(predictions=german, references=["", ""], target_lang="de")["off_target_rate"]
        == 0.0
    )
    assert (
        metric.compute(predictions=french + [""], references=[""] * 3, target_lang="fr")[
            "off_target_rate"
        ]
        == 0.3333
    )
    with pytest.raises(ValueError, match="needs the target language"):
        metric.compute(predictions=german, references=["", ""])


def test_unknown_configuration_is_refused():
    with pytest.raises(ValueError, match="Unknown configuration 'bleurt'.*'chrf', 'default'"):
        load_translation_metric("bleurt")


@pytest.mark.parametrize("where", ["script", "directory"])
def test_evaluate_load_of_the_local_path_needs_no_network(tmp_path, where):
    # evaluate.load takes the script, or a directory holding <directory name>.py
    path = translation_metric_path()
    if where == "directory":
        folder = tmp_path / "metric_translation"
        folder.mkdir()
        (folder / "metric_translation.py").write_bytes(METRIC_SCRIPT.read_bytes())
        path = str(folder)
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_EVALUATE_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
        OMP_NUM_THREADS="1",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            NO_NETWORK + LOAD_AND_SCORE,
            path,
            json.dumps(HYPOTHESES),
            json.dumps(REFERENCES),
        ],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == score_translations(
        HYPOTHESES, REFERENCES
    )


def test_without_the_package_the_module_says_what_to_install(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_EVALUATE_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
        OMP_NUM_THREADS="1",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_PACKAGE + LOAD_AND_SCORE,
            translation_metric_path(),
            json.dumps(HYPOTHESES),
            json.dumps(REFERENCES),
        ],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "computes its scores with the modeling_dwlstm package: install it" in result.stderr


# --- compute_metrics for Seq2SeqTrainer -----------------------------------------------------------


@pytest.fixture(scope="module")
def tagged_tokenizer():
    texts = HYPOTHESES + REFERENCES + ["Ein Hund spielt im Park.", "A man rides a horse."] * 3
    return train_joint_bpe_tokenizer(texts, vocab_size=200, language_tags=["<2de>", "<2fr>"])


def padded(rows: list[list[int]], fill: int) -> np.ndarray:
    width = max(len(row) for row in rows)
    return np.array([row + [fill] * (width - len(row)) for row in rows])


def trainer_batch(tokenizer) -> EvalPrediction:
    """What Seq2SeqTrainer passes with predict_with_generate: generated ids (decoder start, a
    language tag the model emitted, padding, then the Trainer's -100 across batches) and labels
    padded with -100."""
    tag = tokenizer.convert_tokens_to_ids("<2de>")
    start = tokenizer.pad_token_id  # the decoder start
    generated = [[start, tag, *tokenizer(text)["input_ids"]] for text in HYPOTHESES]
    generated[0] += [tokenizer.pad_token_id] * 3
    predictions = padded(generated, -100)
    labels = padded([tokenizer(text)["input_ids"] for text in REFERENCES], -100)
    assert (
        (predictions == -100).any() and (labels == -100).any() and (predictions == tag).sum() == 3
    )
    return EvalPrediction(predictions=predictions, label_ids=labels)


def test_compute_metrics_decodes_a_masked_tagged_batch_and_scores_it(tagged_tokenizer):
    compute_metrics = translation_compute_metrics(tagged_tokenizer, target_lang="de")
    expected = score_translations(HYPOTHESES, REFERENCES, "de")
    result = compute_metrics(trainer_batch(tagged_tokenizer))
    assert result == {
        "bleu": expected["sacrebleu"],
        "tokenized_bleu": expected["tokenized_bleu"],
        "chrf": expected["chrf"],
    }
    assert all(type(value) is float for value in result.values())  # what the Trainer logs


def test_compute_metrics_takes_another_evaluate_metric(tagged_tokenizer):
    # by name or path (a Hub name such as "sacrebleu" needs the Hub; a path does not), or loaded
    by_path = translation_compute_metrics(tagged_tokenizer, metric=translation_metric_path())
    combined = evaluate.combine(
        [load_translation_metric("chrf"), load_translation_metric("sacrebleu")]
    )
    loaded = translation_compute_metrics(tagged_tokenizer, metric=combined)
    expected = score_translations(HYPOTHESES, REFERENCES)
    assert by_path(trainer_batch(tagged_tokenizer)) == {
        "bleu": expected["sacrebleu"],
        "tokenized_bleu": expected["tokenized_bleu"],
        "chrf": expected["chrf"],
    }
    assert loaded(trainer_batch(tagged_tokenizer)) == {
        "chrf": expected["chrf"],
        "bleu": expected["sacrebleu"],
    }
    with pytest.raises(TypeError, match="`metric` must be None, an evaluate metric's name or path"):
        translation_compute_metrics(tagged_tokenizer, metric=42)


# --- a metric Space on the (loopback) Hub ---------------------------------------------------------


def test_push_as_a_metric_space_then_evaluate_load_by_repo_id(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    with LoopbackHub() as hub:
        push_translation_metric("user/dwlstm_translation", endpoint=hub.endpoint, token="t")
        files = hub.repos["user/dwlstm_translation"]
        assert set(files) == {"dwlstm_translation.py", "README.md", "app.py", "requirements.txt"}
        assert files["dwlstm_translation.py"] == METRIC_SCRIPT.read_bytes()
        assert (
            files["README.md"].startswith(b"---\ntitle:")
            and b"- evaluate\n- metric\n" in files["README.md"]
        )
        assert b'evaluate.load("user/dwlstm_translation")' in files["app.py"]
        assert ("POST", "/api/spaces/user/dwlstm_translation/commit/main") in hub.requests

        env.update(
            HF_ENDPOINT=hub.endpoint,
            HF_HOME=str(tmp_path / "hf"),
            HF_UPDATE_DOWNLOAD_COUNTS="0",
            OMP_NUM_THREADS="1",
        )
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                LOAD_AND_SCORE,
                "user/dwlstm_translation",
                json.dumps(HYPOTHESES),
                json.dumps(REFERENCES),
            ],
            check=False,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert any(
            method == "GET"
            and path.startswith("/spaces/user/dwlstm_translation/resolve/")
            and path.endswith("/dwlstm_translation.py")
            for method, path in hub.requests
        )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == score_translations(
        HYPOTHESES, REFERENCES
    )


@pytest.mark.parametrize("repo_id", ["dwlstm_translation", "user/", "a/b/c", None])
def test_push_rejects_a_bad_repo_id(repo_id):
    with pytest.raises(ValueError, match="`repo_id` must look like 'user/name'"):
        push_translation_metric(repo_id, endpoint="http://127.0.0.1:9", token="t")
