"""The quickstart: the whole path from raw text to a shared model, on the project's own corpus, in
minutes on a CPU.

`run_quickstart(output_dir)` (what `make quickstart` / `scripts/quickstart.py` run):

1. writes the generated English -> German corpus (`quickstart_corpus`) as
   `data/{train,valid,test}.{en,de}`;
2. trains a joint BPE tokenizer on the training pairs (`data.train_corpus_tokenizer`);
3. decodes the test set with the *untrained* model, for comparison;
4. trains a small depth-wise LSTM Transformer with `training.train_translation` (Seq2SeqTrainer,
   token-budget batches, Adam + inverse-sqrt warm-up, label smoothing);
5. reloads the saved model with `AutoModelForSeq2SeqLM.from_pretrained`, decodes the test set with
   beam search and scores it (`evaluation`), writes a model card (`hub.model_card`);
6. translates a few new sentences with `pipeline("translation")` from the saved directory.

Everything lands in `output_dir`; `summary.json` holds the numbers. Nothing is downloaded.
"""

import logging
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from transformers import pipeline, set_seed

from .checkpoints import load_saved_model, load_saved_tokenizer, save_pretrained_atomically
from .data import load_parallel_corpus, train_corpus_tokenizer
from .evaluation import score_translations, translate_sentences, write_json
from .files import (
    atomic_write_json,
    atomic_write_text,
    claim_output_dir,
    prepare_output_dir,
    releasing_output_dirs,
)
from .hub import model_card
from .quickstart_corpus import SOURCE_LANG, TARGET_LANG, write_corpus
from .training import (
    DataArguments,
    ModelArguments,
    TranslationTrainingArguments,
    build_model_and_tokenizer,
    train_translation,
)

logger = logging.getLogger(__name__)

# A small depth-wise LSTM model: 3 + 3 layers of width 128, 400 steps take about 1.5 minutes on 2
# CPU cores.
QUICKSTART_MODEL = {
    "model_type": "dwlstm",
    "d_model": 128,
    "ffn_dim": 256,
    "encoder_layers": 3,
    "decoder_layers": 3,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "label_smoothing": 0.1,
    "max_position_embeddings": 128,
}
DEMO_SENTENCES = [
    "The old teacher found a red ball.",
    "Today the children see the small horses.",
    "A young woman slept because the dog sang.",
]


@dataclass
class QuickstartSettings:
    """Sizes of the quickstart; the defaults are `make quickstart`'s, the tests shrink them."""

    train_pairs: int = 12000
    valid_pairs: int = 200
    test_pairs: int = 200
    merges: int = 300
    max_steps: int = 400
    warmup_steps: int = 100
    learning_rate: float = 2e-3
    max_tokens: int = 1024
    num_beams: int = 4
    # the longest German test sentence has about 25 tokens; the untrained model babbles on
    max_new_tokens: int = 40
    seed: int = 0
    # train under bfloat16 autocast (it reaches float32's validation loss, README)
    bf16: bool = False
    model: dict = field(default_factory=lambda: dict(QUICKSTART_MODEL))


# What the quickstart writes into its folder (and the hidden staging folders and claims of an
# interrupted run).
QUICKSTART_OUTPUTS = re.compile(
    r"data|tokenizer|model-config\.json|model|summary\.json|\..*\.(incomplete|old|in-use|tmp)"
)


def clear_quickstart_output(output_dir: str | Path) -> None:
    """``--overwrite``: delete an earlier quickstart's `output_dir` (claimed first, so that a
    quickstart still running there is not deleted under it); a folder holding anything the
    quickstart does not write is refused."""
    output_dir = Path(output_dir)
    if not output_dir.exists():
        return
    claim_output_dir(output_dir)
    if not output_dir.is_dir():
        raise ValueError(f"--output_dir {output_dir} is a file; choose a folder.")
    foreign = sorted(
        entry.name for entry in output_dir.iterdir() if not QUICKSTART_OUTPUTS.fullmatch(entry.name)
    )
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ValueError(
            f"--overwrite deletes an earlier quickstart's output, but {output_dir} also holds "
            f"{shown}, "
            "which the quickstart does not write: choose another --output_dir, or delete it "
            "yourself."
        )
    shutil.rmtree(output_dir)


@releasing_output_dirs
def run_quickstart(output_dir: str | Path, settings: QuickstartSettings | None = None) -> dict:
    """Build the corpus, train tokenizer and model, evaluate before and after, reload, translate;
    return the summary."""
    settings = settings or QuickstartSettings()
    output_dir = Path(output_dir)
    prepare_output_dir(output_dir, flag="--overwrite")  # empty and writable, before any work
    start = time.perf_counter()
    timings = {}

    data_dir = write_corpus(
        output_dir / "data",
        {"train": settings.train_pairs, "valid": settings.valid_pairs, "test": settings.test_pairs},
        seed=settings.seed,
    )
    test = load_parallel_corpus(data_dir, SOURCE_LANG, TARGET_LANG, "test")["translation"]
    sources, references = [pair[SOURCE_LANG] for pair in test], [pair[TARGET_LANG] for pair in test]

    train = load_parallel_corpus(data_dir, SOURCE_LANG, TARGET_LANG, "train")
    # One direction, no language tags (a tag the model never saw in training would only confuse it).
    tokenizer = train_corpus_tokenizer(
        [train],
        [SOURCE_LANG, TARGET_LANG],
        merges=settings.merges,
        language_tags=[],
        model_max_length=settings.model["max_position_embeddings"],
    )
    save_pretrained_atomically(tokenizer, output_dir / "tokenizer")
    config_file = atomic_write_json(output_dir / "model-config.json", settings.model)
    model_args = ModelArguments(
        model_name_or_path=str(config_file), tokenizer_name_or_path=str(output_dir / "tokenizer")
    )
    timings["data_and_tokenizer_s"] = time.perf_counter() - start

    set_seed(settings.seed)
    untrained, _ = build_model_and_tokenizer(model_args, f"{SOURCE_LANG}-{TARGET_LANG}")
    untrained_scores, _ = _evaluate(
        untrained, tokenizer, sources, references, settings, timings, "untrained"
    )

    run_dir = output_dir / "model"
    training_args = TranslationTrainingArguments(
        output_dir=str(run_dir),
        max_steps=settings.max_steps,
        warmup_steps=settings.warmup_steps,
        learning_rate=settings.learning_rate,
        save_strategy="no",
        logging_steps=max(1, settings.max_steps // 10),
        eval_strategy="steps",
        eval_steps=max(1, settings.max_steps // 2),
        eval_on_start=True,
        per_device_eval_batch_size=64,
        seed=settings.seed,
        use_cpu=True,
        bf16=settings.bf16,
        dataloader_num_workers=0,
        report_to="none",
    )
    data_args = DataArguments(
        dataset=str(data_dir),
        source_lang=SOURCE_LANG,
        target_lang=TARGET_LANG,
        validation_split="valid",
        max_tokens=settings.max_tokens,
    )
    phase = time.perf_counter()
    trainer = train_translation(model_args, data_args, training_args)
    timings["training_s"] = time.perf_counter() - phase
    validation_losses = [
        entry["eval_loss"] for entry in trainer.state.log_history if "eval_loss" in entry
    ]

    # the saved model, as a user would load it (checksums verified)
    model = load_saved_model(run_dir)
    tokenizer = load_saved_tokenizer(run_dir)
    trained_scores, hypotheses = _evaluate(
        model, tokenizer, sources, references, settings, timings, "trained"
    )
    training_data = (
        f"{settings.train_pairs} English-German pairs generated by nmt_toolkit.quickstart_corpus "
        f"(seed {settings.seed}); joint BPE with {settings.merges} merges."
    )
    results = {
        "test_set": "quickstart test split",
        "num_beams": settings.num_beams,
        "length_penalty": 1.0,
        **trained_scores,
    }
    atomic_write_text(run_dir / "README.md", model_card(model, training_data, results))

    translator = pipeline("translation_en_to_de", model=str(run_dir), trust_remote_code=True)
    demo = [
        record["translation_text"]
        for record in translator(DEMO_SENTENCES, num_beams=settings.num_beams)
    ]
    timings["total_s"] = time.perf_counter() - start
    summary = {
        "output_dir": str(output_dir),
        "settings": asdict(settings),
        "parameters": model.num_parameters(),
        "validation_loss": validation_losses,
        "untrained": untrained_scores,
        "trained": trained_scores,
        "examples": [
            {"source": source, "reference": reference, "hypothesis": hypothesis}
            for source, reference, hypothesis in list(zip(sources, references, hypotheses))[:3]
        ],
        "pipeline": [
            {"source": source, "translation": text} for source, text in zip(DEMO_SENTENCES, demo)
        ],
        "seconds": {name: round(value, 1) for name, value in timings.items()},
    }
    write_json(summary, output_dir / "summary.json")
    return summary


def format_summary(summary: dict) -> str:
    """The summary as a few lines for a person."""
    untrained, trained = summary["untrained"], summary["trained"]
    lines = [
        (
            f"Model: depth-wise LSTM Transformer, {summary['parameters'] / 1e6:.2f}M parameters, "
            f"{summary['settings']['max_steps']} training steps ("
            f"{summary['seconds']['training_s']:.0f} s)."
        ),
        "Validation loss during training: "
        + " -> ".join(f"{loss:.2f}" for loss in summary["validation_loss"]),
        (
            f"Test BLEU ({trained['sentences']} held-out sentences, beam "
            f"{summary['settings']['num_beams']}): untrained {untrained['sacrebleu']:.1f} -> "
            f"trained {trained['sacrebleu']:.1f} (tokenized BLEU "
            f"{untrained['tokenized_bleu']:.1f} -> {trained['tokenized_bleu']:.1f}, chrF "
            f"{untrained['chrf']:.1f} -> {trained['chrf']:.1f})"
        ),
        f"  {trained['sacrebleu_signature']}",
        "Test examples:",
    ]
    for example in summary["examples"]:
        lines += [
            f"  EN  {example['source']}",
            f"  REF {example['reference']}",
            f"  OUT {example['hypothesis']}",
        ]
    lines.append('pipeline("translation_en_to_de") on new sentences, from the saved model:')
    lines += [
        f"  {record['source']}  ->  {record['translation']}" for record in summary["pipeline"]
    ]
    lines.append(
        f"Total {summary['seconds']['total_s']:.0f} s. Everything is in {summary['output_dir']} "
        "(data/, tokenizer/, model/ with README.md model card, summary.json)."
    )
    return "\n".join(lines)


def _evaluate(model, tokenizer, sources, references, settings, timings, name):
    phase = time.perf_counter()
    translations = translate_sentences(
        model,
        tokenizer,
        sources,
        num_beams=settings.num_beams,
        max_new_tokens=settings.max_new_tokens,
    )
    scores = score_translations(translations.hypotheses, references, TARGET_LANG)
    scores["sentences_per_second"] = round(translations.sentences_per_second, 1)
    timings[f"evaluate_{name}_s"] = time.perf_counter() - phase
    logger.info(
        "%s model: BLEU %.1f on %d test sentences.", name, scores["sacrebleu"], len(sources)
    )
    return scores, translations.hypotheses
