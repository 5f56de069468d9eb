"""The real-data integration test: Multi30k en->de from its folder, trained, averaged, evaluated.

One run of the whole path a user takes (README "Multi30k from a local folder"): joint BPE on the
training pairs, `train_translation` (Seq2SeqTrainer, token-budget batches, the papers' optimiser and
schedule) of a small depth-wise LSTM model with a checkpoint every 100 steps, the average of the
last checkpoints, and `run_evaluation` (beam search, sacreBLEU, tokenized BLEU, chrF) on the flickr
2016 test set against the untrained model.
"""

import itertools
import json

import pytest
from conftest import MULTI30K
from transformers import AutoModelForSeq2SeqLM

from nmt_toolkit.checkpoints import average_checkpoints, last_checkpoints
from nmt_toolkit.data import load_parallel_corpus, train_corpus_tokenizer
from nmt_toolkit.evaluation import EvaluationArguments, run_evaluation
from nmt_toolkit.training import (
    DataArguments,
    ModelArguments,
    TranslationTrainingArguments,
    train_translation,
)

pytestmark = [
    pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k not found at {MULTI30K}"),
    pytest.mark.usefixtures("one_thread"),
]

MODEL = {
    "model_type": "dwlstm",
    "d_model": 64,
    "ffn_dim": 128,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "dropout": 0.1,
    "max_position_embeddings": 128,
}
STEPS, SAVE_EVERY, AVERAGE_LAST, TEST_SENTENCES = 300, 100, 2, 100


def evaluate(model_dir, output_dir):
    return run_evaluation(
        EvaluationArguments(
            model=str(model_dir),
            output_dir=str(output_dir),
            data=str(MULTI30K),
            split="test_2016_flickr",
            source_lang="en",
            target_lang="de",
            max_pairs=TEST_SENTENCES,
            num_beams=4,
            max_new_tokens=40,
        )
    )


def test_multi30k_train_average_evaluate(tmp_path):
    train = load_parallel_corpus(MULTI30K, "en", "de", "train", max_pairs=3000)
    tokenizer = train_corpus_tokenizer([train], ["en", "de"], merges=1000, model_max_length=128)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    (tmp_path / "model.json").write_text(json.dumps(MODEL))
    run = tmp_path / "run"
    trainer = train_translation(
        ModelArguments(
            model_name_or_path=str(tmp_path / "model.json"),
            tokenizer_name_or_path=str(tmp_path / "tokenizer"),
        ),
        DataArguments(
            dataset=str(MULTI30K),
            source_lang="en",
            target_lang="de",
            validation_split="val",
            max_train_pairs=3000,
            max_validation_pairs=200,
            max_tokens=1024,
        ),
        TranslationTrainingArguments(
            output_dir=str(run),
            max_steps=STEPS,
            warmup_steps=50,
            learning_rate=3e-3,
            save_steps=SAVE_EVERY,
            eval_strategy="steps",
            eval_steps=SAVE_EVERY,
            eval_on_start=True,
            logging_steps=50,
            use_cpu=True,
            seed=0,
            disable_tqdm=True,
        ),
    )
    losses = [entry["eval_loss"] for entry in trainer.state.log_history if "eval_loss" in entry]
    assert len(losses) == 1 + STEPS // SAVE_EVERY
    assert all(later < earlier for earlier, later in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.65 * losses[0], losses  # label-smoothed (0.1) loss, e.g. 7.7 -> 4.6

    checkpoints = last_checkpoints(run, AVERAGE_LAST)
    assert [path.name for path in checkpoints] == ["checkpoint-200", "checkpoint-300"]
    averaged = average_checkpoints(checkpoints, tmp_path / "averaged")
    model = AutoModelForSeq2SeqLM.from_pretrained(averaged)
    assert model.config.model_type == "dwlstm" and model.config.d_model == 64

    # The untrained model: the same config and tokenizer, freshly initialised (the run's
    # starting point).
    untrained_dir = tmp_path / "untrained"
    AutoModelForSeq2SeqLM.from_config(model.config).save_pretrained(untrained_dir)
    tokenizer.save_pretrained(untrained_dir)

    trained, untrained = (
        evaluate(averaged, tmp_path / "eval"),
        evaluate(untrained_dir, tmp_path / "eval-untrained"),
    )
    print(
        f"Multi30k en->de, {STEPS} steps: validation loss "
        f"{' -> '.join(f'{loss:.2f}' for loss in losses)}; test BLEU (first {TEST_SENTENCES}, "
        f"averaged last {AVERAGE_LAST}) {untrained['sacrebleu']} -> {trained['sacrebleu']}, chrF "
        f"{untrained['chrf']} -> {trained['chrf']}, {trained['sentences_per_second']} sentences/s"
    )
    hypotheses = (tmp_path / "eval" / "hypotheses.txt").read_text(encoding="utf-8").splitlines()
    assert trained["sentences"] == TEST_SENTENCES == len(hypotheses)
    assert "tok:13a" in trained["sacrebleu_signature"]
    assert (
        trained["sacrebleu"] > untrained["sacrebleu"]
        and trained["tokenized_bleu"] > untrained["tokenized_bleu"]
    )
    assert trained["chrf"] > untrained["chrf"] + 10
