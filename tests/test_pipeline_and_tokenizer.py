"""The joint BPE tokenizer, the translation pipeline (in-process and as remote code) and
Seq2SeqTrainer, on Multi30k."""

import copy
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import sacrebleu
import torch
from conftest import MULTI30K, WITHOUT_PACKAGE, read_multi30k
from datasets import Dataset
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    pipeline,
)
from transformers.pipelines import PIPELINE_REGISTRY, REMOVED_TASKS

import modeling_dwlstm
from modeling_dwlstm.pipeline_translation import (
    register_translation_pairs,
    register_translation_pipeline,
)
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.metrics import translation_compute_metrics

TAGS = ["<2de>", "<2en>"]
# the same settings for the pipeline and for generate()
GENERATE = dict(num_beams=2, max_new_tokens=10)


def tiny_model(tokenizer, **overrides):
    """A small untrained DwLstm model whose special ids and vocabulary match `tokenizer`."""
    torch.manual_seed(0)
    config = modeling_dwlstm.DwLstmConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=64,
        max_position_embeddings=128,
        language_pairs=["en-de"],
        **overrides,
    )
    return AutoModelForSeq2SeqLM.from_config(config).eval()


def generate_text(model, tokenizer, input_ids: list[int], settings: dict = GENERATE) -> str:
    """What the pipeline should say: generate() on exactly these ids, decoded."""
    input_ids = torch.tensor([input_ids])
    with torch.no_grad():
        output = model.generate(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **settings
        )
    return tokenizer.decode(output[0], skip_special_tokens=True)


@pytest.fixture(scope="module")
def corpus():
    if not MULTI30K.is_dir():
        pytest.skip(f"Multi30k is not at {MULTI30K}")
    return read_multi30k("train", "en", 300), read_multi30k("train", "de", 300)


@pytest.fixture(scope="module")
def tokenizer(corpus):
    english, german = corpus
    return train_joint_bpe_tokenizer(english + german, vocab_size=800, language_tags=TAGS)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer)


# --- tokenizer ------------------------------------------------------------------------------------


def test_special_tokens_and_language_tags_have_fixed_ids(tokenizer):
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3, 4, 5]) == [
        "<s>",
        "<pad>",
        "</s>",
        "<unk>",
        *TAGS,
    ]
    special_ids = (
        tokenizer.bos_token_id,
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        tokenizer.unk_token_id,
    )
    assert special_ids == (0, 1, 2, 3)
    assert len(tokenizer) == 800
    assert tokenizer_model_kwargs(tokenizer) == {
        "vocab_size": 800,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "decoder_start_token_id": 1,
        # what a language-aware model reads the target language from
        "language_tag_ids": {"de": 4, "en": 5},
    }


def test_language_tags_are_never_split(tokenizer, corpus):
    sentence = corpus[0][3]
    plain = tokenizer(sentence)["input_ids"]
    assert tokenizer("<2de> " + sentence)["input_ids"] == [4] + plain
    assert tokenizer("<2en>" + sentence)["input_ids"] == [5] + plain
    assert tokenizer.tokenize("<2de>") == ["<2de>"]
    assert len(tokenizer.tokenize("<2fr>")) > 1  # an unreserved tag is ordinary text


def test_every_sequence_ends_with_eos_and_decodes_back(tokenizer, corpus):
    english, german = corpus
    batch = tokenizer(english[:8], text_target=german[:8])
    for ids in batch["input_ids"] + batch["labels"]:
        assert ids[-1] == tokenizer.eos_token_id and tokenizer.eos_token_id not in ids[:-1]
    for sentence in english + german:
        ids = tokenizer(sentence)["input_ids"]
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids, skip_special_tokens=True) == sentence


def test_save_and_load_with_auto_tokenizer_gives_identical_ids(tokenizer, corpus, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    sentences = corpus[0][:50] + corpus[1][:50] + ["<2de> " + corpus[0][0]]
    assert [loaded(s)["input_ids"] for s in sentences] == [
        tokenizer(s)["input_ids"] for s in sentences
    ]
    assert (loaded.bos_token, loaded.pad_token, loaded.eos_token, loaded.unk_token) == (
        "<s>",
        "<pad>",
        "</s>",
        "<unk>",
    )
    assert len(loaded) == len(tokenizer)


@pytest.mark.parametrize(
    "texts, vocab_size, tags, message",
    [
        # 4 specials + 10 characters do not fit in 10 ids
        (["a small corpus"], 10, (), "too small"),
        (["a small corpus"], 4, (), "larger than the 4 special tokens"),
        ([], 100, (), "empty"),
        (["", "   "], 100, (), "empty"),
        (["text"], 100, ["2de"], "look like '<2de>'"),
        (["text"], 100, ["<de>"], "look like '<2de>'"),
        (["text"], 100, ["<2de>", "<2de>"], "unique"),
        (["text"], 100, "<2de>", "not a string"),
        ("one string", 100, (), "iterable of sentences"),
    ],
)
def test_bad_inputs_raise_value_error(texts, vocab_size, tags, message):
    with pytest.raises(ValueError, match=message):
        train_joint_bpe_tokenizer(texts, vocab_size=vocab_size, language_tags=tags)


# --- pipeline, in-process -------------------------------------------------------------------------


def test_registration_is_idempotent_and_extensible():
    aliases = dict(PIPELINE_REGISTRY.task_aliases)
    register_translation_pipeline()
    register_translation_pipeline()
    assert PIPELINE_REGISTRY.task_aliases == aliases
    assert "translation" not in REMOVED_TASKS
    assert (
        PIPELINE_REGISTRY.supported_tasks["translation"]["impl"]
        is modeling_dwlstm.TranslationPipeline
    )
    for task in (
        "translation_en_to_de",
        "translation_de_to_en",
        "translation_en_to_fr",
        "translation_cs_to_en",
        # WMT, OPUS-100, a direct (non-English) pair
        "translation_en_to_zu",
        "translation_de_to_fr",
    ):
        assert aliases[task] == "translation"
    register_translation_pairs(["sv-fi", ("fi", "sv")])
    assert PIPELINE_REGISTRY.task_aliases["translation_sv_to_fi"] == "translation"
    assert PIPELINE_REGISTRY.task_aliases["translation_fi_to_sv"] == "translation"
    for bad in ("en", "en-en", "en_de", ("en",), "e-de"):
        with pytest.raises(ValueError):
            register_translation_pairs(["nl-sv", bad])
        # nothing registered from a bad list
        assert "translation_nl_to_sv" not in PIPELINE_REGISTRY.task_aliases


def test_pipeline_translation_is_generate_decoded(model, tokenizer, corpus):
    sentence = corpus[0][0]
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    assert isinstance(translator, modeling_dwlstm.TranslationPipeline)
    result = translator(sentence, **GENERATE)
    # its one target's tag
    tagged = [tokenizer.convert_tokens_to_ids("<2de>")] + tokenizer(sentence)["input_ids"]
    assert result == [{"translation_text": generate_text(model, tokenizer, tagged)}]
    assert isinstance(result[0]["translation_text"], str) and result[0]["translation_text"]


def test_pipeline_passes_generation_settings_to_generate(model, tokenizer, corpus):
    sentence = corpus[0][0]
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    texts = set()
    input_ids = [tokenizer.convert_tokens_to_ids("<2de>")] + tokenizer(sentence)["input_ids"]
    for beams, new_tokens in ((1, 10), (2, 10), (2, 4)):
        settings = dict(num_beams=beams, max_new_tokens=new_tokens)
        expected = generate_text(model, tokenizer, input_ids, settings)
        assert translator(sentence, **settings) == [{"translation_text": expected}]
        texts.add(expected)
    # every setting changes this output, so none of them can have been dropped
    assert len(texts) == 3


def test_pipeline_with_language_pair_prepends_the_target_tag(model, tokenizer, corpus):
    sentence = corpus[0][0]
    input_ids = tokenizer(sentence)["input_ids"]
    expected = generate_text(
        model, tokenizer, [tokenizer.convert_tokens_to_ids("<2de>")] + input_ids
    )
    # so the tag matters for this sentence
    assert expected != generate_text(model, tokenizer, input_ids)
    by_task = pipeline("translation_en_to_de", model=model, tokenizer=tokenizer)
    assert by_task(sentence, **GENERATE) == [{"translation_text": expected}]
    by_argument = pipeline("translation", model=model, tokenizer=tokenizer)
    assert by_argument(sentence, tgt_lang="de", **GENERATE) == [{"translation_text": expected}]
    # its one target language
    assert by_argument(sentence, **GENERATE) == [{"translation_text": expected}]
    # no second tag
    assert by_task("<2de> " + sentence, **GENERATE) == [{"translation_text": expected}]


def test_pipeline_lists_batches_and_several_sequences(model, tokenizer, corpus):
    sentences = corpus[0][:3]
    translator = pipeline("translation_en_to_de", model=model, tokenizer=tokenizer)
    one_by_one = [translator(sentence, **GENERATE)[0] for sentence in sentences]
    assert translator(sentences, **GENERATE) == one_by_one
    assert translator(sentences, batch_size=2, **GENERATE) == one_by_one
    several = translator(sentences[:2], num_return_sequences=2, **GENERATE)
    assert len(several) == 2 and all(len(translations) == 2 for translations in several)
    assert all(
        isinstance(t["translation_text"], str) for translations in several for t in translations
    )
    [record] = translator(sentences[0], return_tensors=True, **GENERATE)
    text = tokenizer.decode(record["translation_token_ids"], skip_special_tokens=True)
    assert text == one_by_one[0]["translation_text"]


# --- pipeline, from a saved directory as remote code ----------------------------------------------

REMOTE_SCRIPT = WITHOUT_PACKAGE + textwrap.dedent(
    """
    import json, sys
    from transformers import pipeline
    sentences, settings = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    results = {}
    for task in ("translation", "translation_en_to_de"):
        translator = pipeline(task, model="saved", trust_remote_code=True)
        assert type(translator).__module__.startswith("transformers_modules"), type(translator).__module__
        results[task] = translator(sentences, **settings)
    print(json.dumps(results))
    """  # noqa: E501
)


def test_saved_model_translates_without_the_package(model, tokenizer, corpus, tmp_path):
    sentences = corpus[0][:2]
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    expected = {
        task: pipeline(task, model=model, tokenizer=tokenizer)(sentences, **GENERATE)
        for task in ("translation", "translation_en_to_de")
    }
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, json.dumps(sentences), json.dumps(GENERATE)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


def test_with_the_package_imported_nothing_needs_trust_remote_code_or_asks_for_it(
    model, tokenizer, corpus, tmp_path, monkeypatch
):
    """The Auto classes and the pipeline resolve a saved model to the package's registered classes;
    transformers never asks its interactive "run the custom code? [y/N]" question (which stops a
    script)."""
    sentence = corpus[0][0]
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    questions = []
    monkeypatch.setattr("builtins.input", lambda *prompt: questions.append(prompt) or "n")
    assert type(AutoConfig.from_pretrained(tmp_path)) is modeling_dwlstm.DwLstmConfig
    assert type(AutoModel.from_pretrained(tmp_path)) is modeling_dwlstm.DwLstmModel
    assert (
        type(AutoModelForSeq2SeqLM.from_pretrained(tmp_path))
        is modeling_dwlstm.DwLstmForConditionalGeneration
    )
    assert (
        AutoTokenizer.from_pretrained(tmp_path)(sentence)["input_ids"]
        == tokenizer(sentence)["input_ids"]
    )
    for task in ("translation", "translation_en_to_de"):
        for flag in ({}, {"trust_remote_code": True}):  # the package's code either way
            translator = pipeline(task, model=str(tmp_path), **flag)
            assert type(translator) is modeling_dwlstm.TranslationPipeline, task
            expected = pipeline(task, model=model, tokenizer=tokenizer)(sentence, **GENERATE)
            assert translator(sentence, **GENERATE) == expected
    other = copy.deepcopy(model)
    other.config.language_pairs = ["nl-qq"]  # a direction that no registered task name covers
    other.save_pretrained(tmp_path / "nl-qq")
    tokenizer.save_pretrained(tmp_path / "nl-qq")
    assert (
        type(pipeline("translation_nl_to_qq", model=str(tmp_path / "nl-qq")))
        is modeling_dwlstm.TranslationPipeline
    )
    assert not questions
    # for remote code
    assert "translation" in json.loads((tmp_path / "config.json").read_text())["custom_pipelines"]


DIRECTION_SCRIPT = WITHOUT_PACKAGE + textwrap.dedent(
    """
    import json
    from transformers import pipeline
    try:
        pipeline("translation_de_to_fr", model="saved", trust_remote_code=True)
        print(json.dumps("created"))
    except ValueError as error:
        print(json.dumps(str(error)))
    """
)


def test_an_untrained_direction_is_refused_with_the_models_directions_with_and_without_the_package(
    model, tokenizer, tmp_path
):
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    message = (
        "Unsupported direction de to fr: this model translates ['en-de'] (its config's "
        "language_pairs)"
    )
    for source in (str(tmp_path / "saved"), model):  # a saved model, a loaded one
        with pytest.raises(ValueError) as error:
            pipeline("translation_de_to_fr", model=source, tokenizer=tokenizer)
        assert str(error.value).startswith(message)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-c", DIRECTION_SCRIPT],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]).startswith(message)


# --- Seq2SeqTrainer -------------------------------------------------------------------------------


def test_seq2seq_trainer_trains_and_predicts_with_generate(corpus, tmp_path):
    english, german = corpus[0][:80], corpus[1][:80]
    tokenizer = train_joint_bpe_tokenizer(english + german, vocab_size=600)
    model = tiny_model(tokenizer, dropout=0.0).train()

    def encode(batch):
        return tokenizer(batch["en"], text_target=batch["de"], truncation=True, max_length=64)

    pairs = Dataset.from_dict({"en": english, "de": german}).map(
        encode, batched=True, remove_columns=["en", "de"]
    )
    train, test = pairs.select(range(64)), pairs.select(range(64, 80))
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        predict_with_generate=True,
        label_smoothing_factor=0.1,
        max_steps=4,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=8,
        learning_rate=3e-3,
        generation_max_length=24,
        generation_num_beams=2,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=0,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        compute_metrics=translation_compute_metrics(tokenizer),
    )
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    training = trainer.train()
    assert math.isfinite(training.training_loss) and training.training_loss > 0
    changed = [
        name
        for name, parameter in model.named_parameters()
        if not torch.equal(parameter, before[name])
    ]
    assert "model.shared.weight" in changed and len(changed) > len(before) // 2, changed

    prediction = trainer.predict(test)
    assert prediction.predictions.shape[0] == len(test)
    references = tokenizer.batch_decode(
        replace_ignored(prediction.label_ids, tokenizer), skip_special_tokens=True
    )
    assert references == german[64:]  # what compute_metrics scores against
    hypotheses = tokenizer.batch_decode(
        replace_ignored(prediction.predictions, tokenizer), skip_special_tokens=True
    )
    assert all(isinstance(hypothesis, str) for hypothesis in hypotheses)
    expected = sacrebleu.corpus_bleu(hypotheses, [german[64:]]).score
    # rounded as in results.json
    assert prediction.metrics["test_bleu"] == pytest.approx(expected, abs=0.01)
    assert 0.0 <= expected <= 100.0


def replace_ignored(ids: np.ndarray, tokenizer) -> np.ndarray:
    """The Trainer pads predictions and labels of different lengths with -100, which decode()
    cannot read."""
    return np.where(ids == -100, tokenizer.pad_token_id, ids)
