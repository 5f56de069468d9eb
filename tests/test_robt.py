"""Random online back-translation (ROBT; Zhang et al. 2020): the synthetic pairs' tags and
languages, their random draws (by update, process and micro-batch), training with them, resuming,
and ROBT as a fine-tuning stage."""

from collections import Counter

import pytest
import torch
from conftest import MULTI30K
from safetensors.torch import load_file

# fixtures
from test_multilingual import LANGUAGES, multilingual_arguments, tokenizer, training_setup  # noqa: F401
from test_sharding import REPOSITORY, accelerate_launch, logged
from transformers import AutoModelForSeq2SeqLM, DataCollatorForSeq2Seq

import modeling_dwlstm
from modeling_dwlstm.tokenization_dwlstm import language_tag_ids, tokenizer_model_kwargs
from nmt_toolkit import back_translation, training
from nmt_toolkit.back_translation import RandomOnlineBackTranslation
from nmt_toolkit.multilingual import (
    load_multilingual_corpus,
    parse_language_pairs,
    tokenize_directions,
)
from nmt_toolkit.training import ModelArguments, train_translation

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k is not at {MULTI30K}"),
]
SUPERVISED = "en-de,de-en,en-fr,fr-en,en-cs,cs-en"


@pytest.fixture(scope="module")
def model_and_batch(tokenizer):  # noqa: F811  (the fixture imported above)
    torch.manual_seed(0)
    config = modeling_dwlstm.ResidualTransformerConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=32,
        max_position_embeddings=128,
        norm_position="pre",
        language_pairs=SUPERVISED.split(","),
        language_aware_norm=True,
        language_aware_transform=True,
    )
    model = AutoModelForSeq2SeqLM.from_config(config)
    corpus = load_multilingual_corpus(
        [(str(MULTI30K), parse_language_pairs(SUPERVISED))], split="val", max_pairs=2
    )
    features = tokenize_directions(corpus, tokenizer).remove_columns("direction").to_list()
    return model, DataCollatorForSeq2Seq(tokenizer, model=model)(features)


def make_robt(tokenizer, share=1.0, model=None):  # noqa: F811
    languages = model.config.target_languages if model is not None else LANGUAGES
    return RandomOnlineBackTranslation(
        share,
        language_tag_ids(tokenizer),
        languages,
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        seed=0,
        max_length=64,
    )


def test_synthetic_pairs_carry_the_target_tag_and_never_the_target_language_as_source(
    model_and_batch,
    tokenizer,  # noqa: F811
):
    model, batch = model_and_batch
    robt = make_robt(tokenizer, model=model)
    tag = language_tag_ids(tokenizer)
    was_training = model.training
    synthetic = robt.synthesize(model, batch, robt.generator(step=3, rank=0, micro_batch=0))
    assert model.training == was_training  # decoded with dropout off, then put back
    assert synthetic.rows == list(range(len(batch["input_ids"])))  # share 1: every pair
    inputs = []  # <2l> y for each pair, l its random language
    for row, target, via, source in zip(
        synthetic.rows, synthetic.target_languages, synthetic.source_languages, synthetic.sources
    ):
        # <2t> x', t the real pair's target language
        assert tag[target] == batch["input_ids"][row, 0] == source[0]
        assert via != target and via in LANGUAGES
        inputs.append(
            [tag[via], *(token for token in batch["labels"][row].tolist() if token != -100)]
        )
    padded = tokenizer.pad({"input_ids": inputs}, return_tensors="pt")
    with torch.no_grad():
        by_hand = model.eval().generate(
            **padded,
            num_beams=1,
            do_sample=False,
            max_length=1 + max(map(len, inputs)) - 1 + back_translation.EXTRA_LENGTH,
        )
    model.train(was_training)
    # x', without the decoder start
    for source, translation in zip(synthetic.sources, by_hand[:, 1:].tolist()):
        assert source[1:] == robt.until_eos(translation) and source[-1] == tokenizer.eos_token_id
    extended = robt.extend(model, dict(batch), step=3, rank=0, micro_batch=0)
    real = len(batch["input_ids"])
    assert len(extended["input_ids"]) == real + len(synthetic.rows)
    assert torch.equal(extended["labels"][real:], batch["labels"][synthetic.rows])
    assert torch.equal(
        extended["decoder_input_ids"][real:], batch["decoder_input_ids"][synthetic.rows]
    )
    for offset, source in enumerate(synthetic.sources):
        assert extended["input_ids"][real + offset, : len(source)].tolist() == source
        assert extended["attention_mask"][real + offset].sum() == len(source)
    assert torch.equal(
        extended["input_ids"][:real, : batch["input_ids"].shape[1]], batch["input_ids"]
    )
    loss = model.train()(**extended).loss  # the synthetic pairs share the real batch's loss
    assert torch.isfinite(loss)


def test_the_draws_depend_on_update_process_and_micro_batch_only(tokenizer):  # noqa: F811
    robt = make_robt(tokenizer, share=0.5)
    tag = language_tag_ids(tokenizer)
    input_ids = torch.tensor([[tag[language], 9, 2] for language in ["de", "en", "fr", "cs"] * 5])
    draws = {
        key: robt.choose(input_ids, robt.generator(*key))
        for key in [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)]
    }
    assert robt.choose(input_ids, robt.generator(0, 0, 0)) == draws[(0, 0, 0)]
    assert len({str(draw) for draw in draws.values()}) == 4
    counts, chosen = [], Counter()
    for step in range(200):
        rows, targets, sources = robt.choose(input_ids, robt.generator(step, 0, 0))
        counts.append(len(rows))
        chosen.update(zip(targets, sources))
    assert sum(counts) / len(counts) == pytest.approx(10, abs=0.5)  # share 0.5 of 20 pairs
    # every other language, never t
    assert set(chosen) == {(t, s) for t in LANGUAGES for s in LANGUAGES if s != t}


def test_robt_settings_are_checked(tokenizer, training_setup, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        make_robt(tokenizer, share=0)
    with pytest.raises(ValueError, match="at least two target languages"):
        RandomOnlineBackTranslation(1.0, language_tag_ids(tokenizer), ["de"], 1, 2)
    with pytest.raises(ValueError, match="no tag for"):
        RandomOnlineBackTranslation(1.0, {"de": 4}, ["de", "it"], 1, 2)
    with pytest.raises(ValueError, match="at most 1"):
        multilingual_arguments(training_setup, tmp_path / "a", robt=1.5)
    model_args, data_args, training_args = multilingual_arguments(
        training_setup, tmp_path / "b", robt=0.5
    )
    (
        data_args.language_pairs,
        data_args.more_datasets,
        data_args.source_lang,
        data_args.target_lang,
    ) = None, None, "en", "de"
    with pytest.raises(ValueError, match="--robt .* is for multilingual training"):
        train_translation(model_args, data_args, training_args)


def recording(extend, batches: list):
    """`RandomOnlineBackTranslation.extend` that keeps every batch it extended (the real pairs and
    their synthetic twins, as the model gets them) in `batches`."""

    def recording_extend(robt, model, batch, step, rank, micro_batch):
        extended = extend(robt, model, batch, step, rank, micro_batch)
        batches.append(
            (step, micro_batch, extended["input_ids"].tolist(), extended["labels"].tolist())
        )
        return extended

    return recording_extend


class KillAfterFirstCheckpoint(training.TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        raise KeyboardInterrupt(f"killed after saving step {state.global_step}")


def test_training_with_robt_resumes_with_the_same_batches_and_fine_tunes_a_trained_model(
    training_setup,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    straight, resumed = [], []
    settings = dict(robt=0.5, gradient_accumulation_steps=2)
    monkeypatch.setattr(
        RandomOnlineBackTranslation,
        "extend",
        recording(RandomOnlineBackTranslation.extend, straight),
    )
    train_translation(*multilingual_arguments(training_setup, tmp_path / "straight", **settings))
    monkeypatch.undo()
    monkeypatch.setattr(
        RandomOnlineBackTranslation,
        "extend",
        recording(RandomOnlineBackTranslation.extend, resumed),
    )
    assert [(step, micro) for step, micro, *_ in straight] == [
        (step, micro) for step in range(12) for micro in (0, 1)
    ]
    assert any(len(ids) > 0 for *_, ids, _ in straight)
    log = (tmp_path / "straight" / "train.log").read_text()
    assert (
        "robt_pairs_per_update" in log
        and "robt_seconds_per_update" in log
        and "robt_time_share" in log
    )

    with pytest.raises(KeyboardInterrupt):
        train_translation(
            *multilingual_arguments(training_setup, tmp_path / "killed", **settings),
            callbacks=[KillAfterFirstCheckpoint()],
        )
    train_translation(
        *multilingual_arguments(
            training_setup, tmp_path / "killed", resume_from_checkpoint="last", **settings
        )
    )
    assert resumed == straight
    first, second = (
        load_file(tmp_path / run / "model.safetensors") for run in ("straight", "killed")
    )
    for name in first:
        torch.testing.assert_close(second[name], first[name], rtol=0, atol=1e-6, msg=name)
    more = multilingual_arguments(
        training_setup,
        tmp_path / "killed",
        resume_from_checkpoint="last",
        robt=1.0,
        gradient_accumulation_steps=2,
    )
    more[2].max_steps = 14
    with pytest.raises(ValueError, match="robt"):  # the share is part of what a resumed run keeps
        train_translation(*more)

    # A fine-tuning stage: a trained model's weights, every pair back-translated, a few updates.
    _, data_args, training_args = multilingual_arguments(
        training_setup, tmp_path / "finetuned", robt=1.0
    )
    training_args.max_steps = 3
    train_translation(ModelArguments(str(tmp_path / "straight")), data_args, training_args)
    finetuned = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "finetuned")
    assert finetuned.config.language_pairs == ["en-de", "de-en", "en-fr"]


def test_two_processes_train_with_robt(training_setup, tmp_path):  # noqa: F811
    """ROBT under `accelerate launch` with two processes (DDP, gloo on the CPU): each process
    back-translates with the model DDP wraps, the synthetic pairs of both are counted, and they
    change what the model learns."""

    def arguments(output_dir, *robt):
        return [
            "--model_name_or_path",
            str(training_setup / "tiny.json"),
            "--tokenizer_name_or_path",
            str(training_setup / "tokenizer"),
            "--dataset",
            str(MULTI30K),
            "--language_pairs",
            "en-de,de-en",
            "--more_datasets",
            f"{training_setup / 'fr.jsonl'}=en-fr",
            "--max_train_pairs",
            "15",
            "--max_tokens",
            "160",
            "--max_steps",
            "3",
            "--warmup_steps",
            "1",
            "--learning_rate",
            "3e-3",
            "--logging_steps",
            "1",
            "--save_strategy",
            "no",
            "--disable_tqdm",
            "true",
            "--seed",
            "0",
            "--output_dir",
            str(output_dir),
            *robt,
        ]

    script = REPOSITORY / "scripts" / "train_translation.py"
    with_robt = accelerate_launch(
        "ddp-1node.yaml", script, arguments(tmp_path / "robt", "--robt", "1.0")
    )
    assert with_robt.returncode == 0, with_robt.stderr[-3000:]
    without = accelerate_launch("ddp-1node.yaml", script, arguments(tmp_path / "plain"))
    assert without.returncode == 0, without.stderr[-3000:]
    pairs = logged(tmp_path / "robt", "robt_pairs_per_update")
    assert len(pairs) == 3 and all(count > 0 for count in pairs)
    robt_loss, plain_loss = logged(tmp_path / "robt", "loss"), logged(tmp_path / "plain", "loss")
    assert len(robt_loss) == len(plain_loss) == 3 and robt_loss[0] != plain_loss[0]
    assert AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "robt").config.language_pairs == [
        "en-de",
        "de-en",
        "en-fr",
    ]
