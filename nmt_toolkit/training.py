"""Train a translation model with `Seq2SeqTrainer`, by the papers' recipe unless told otherwise
(Vaswani et al. 2017, §5; Xu et al. 2024, §3.1).

`train_translation(model_args, data_args, training_args)` is what `dwlstm-train` runs
(`HfArgumentParser` over the three dataclasses below) and what the quickstart calls. It

- builds the model from a `hub_configs/` JSON file (sized to the tokenizer) or loads a saved one;
- loads and tokenizes the corpus (`data.load_parallel_corpus`; pairs over 256 tokens dropped);
- batches by token count (`TokenBatchSampler`), accumulating up to `target_tokens_per_update`;
- optimises with Adam (0.9, 0.98, 1e-9), an inverse-square-root schedule with 8k warm-up steps
  (Vaswani et al. 2017, §5.3; `--learning_rate 3.5e-4` for big), the model's label-smoothed loss;
- saves a checkpoint every 1,500 steps, which `--resume_from_checkpoint last` continues exactly;
- with `--bf16` trains under bfloat16 autocast (on a CPU only with native bfloat16: elsewhere it is
  several times slower than float32, and refused).

Nothing is silent: a non-empty `output_dir` is refused unless resuming or overwriting, a non-finite
loss stops the run at once (`TrainingDiverged`), and resuming with other settings, config or data
than the checkpoint's is refused.
"""

import difflib
import errno
import hashlib
import json
import logging
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import torch
from safetensors import safe_open
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    PrinterCallback,
    ProgressCallback,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    set_seed,
)
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from modeling_dwlstm.precision import cpu_features
from modeling_dwlstm.tokenization_dwlstm import language_tag_ids, tokenizer_model_kwargs

from .arguments import check_finite_number, check_positive_int
from .back_translation import RandomOnlineBackTranslation
from .batching import TokenBatchSampler
from .checkpoints import (
    RUN_ARGUMENTS_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    architecture,
    check_finite_weights,
    check_tokenizer_fingerprint,
    complete_checkpoints,
    config_changes,
    describe_changes,
    load_saved_model,
    load_saved_tokenizer,
    record_saved_folder,
)
from .data import (
    UNKNOWN_SHARE_LIMIT,
    check_language_tag,
    check_unknown_tokens,
    load_parallel_corpus,
    tokenize_pairs,
)
from .files import (
    CHECKSUMS_NAME,
    RECORD_COMMAND,
    DiskFull,
    atomic_write_json,
    claim_output_dir,
    clear_output_dir,
    is_no_space_error,
    prepare_output_dir,
    releasing_output_dirs,
    set_threads,
    verify_checksums,
)
from .launch import check_launch, check_ranks_agree
from .metrics import translation_compute_metrics
from .multilingual import (
    TemperatureTokenBatchSampler,
    check_language_tags,
    load_multilingual_corpus,
    pair_name,
    parse_sources,
    split_by_direction,
    tokenize_directions,
)
from .sharding import ShardedLayersCallback
from .streaming import STATE_FILE as STREAM_STATE_FILE
from .streaming import StreamingTokenBatches, pair_stream, stream_directions, stream_fingerprint

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    """Which model to train and with which tokenizer."""

    model_name_or_path: str = field(
        metadata={
            "help": (
                "A config JSON file (e.g. hub_configs/dwlstm-base-6l.json) for a fresh model, or "
                "a saved model directory / Hub id to continue training."
            )
        }
    )
    tokenizer_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": (
                "Tokenizer directory or Hub id (scripts/train_tokenizer.py writes one); defaults "
                "to model_name_or_path."
            )
        },
    )
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": (
                "Comma-separated config changes for a fresh model, e.g. "
                "'dropout=0.3,encoder_layers=12'."
            )
        },
    )
    threads: int | None = field(
        default=None,
        metadata={
            "help": (
                "torch CPU threads (default: torch's). On a busy machine 1 can be several times "
                "faster."
            )
        },
    )


@dataclass
class DataArguments:
    """Where the parallel data comes from and how it is batched."""

    dataset: str = field(
        metadata={
            "help": (
                "'wmt14', 'wmt15', 'opus100', another Hub id, a folder of {split}.{lang}[.gz] "
                "files, or a .jsonl file."
            )
        }
    )
    source_lang: str | None = field(
        default=None, metadata={"help": "Source language code, e.g. 'en'."}
    )
    target_lang: str | None = field(
        default=None, metadata={"help": "Target language code, e.g. 'de'."}
    )
    language_pairs: str | None = field(
        default=None,
        metadata={
            "help": (
                "Multilingual: the directions to train, e.g. 'en-de,de-en,en-fr,fr-en', or 'all' "
                "(every ordered pair of the corpus's languages); replaces "
                "--source_lang/--target_lang and puts the <2xx> tag on every source."
            )
        },
    )
    more_datasets: list[str] | None = field(
        default=None,
        metadata={
            "help": (
                "Multilingual: further sources with their pairs, each 'SOURCE=PAIRS', e.g. "
                "'opus100=en-fr,fr-en'."
            )
        },
    )
    sampling_temperature: float = field(
        default=1.0,
        metadata={
            "help": (
                "Multilingual: direction i is drawn with probability ~ (n_i / N)^(1/T); 1 = "
                "proportional to the data, 5 = the common OPUS-100 setting."
            )
        },
    )
    train_split: str = field(
        default="train", metadata={"help": "Training split (file prefix for a folder)."}
    )
    validation_split: str | None = field(
        default=None,
        metadata={
            "help": (
                "Validation split ('validation' on the Hub, 'val' for Multi30k); none by default."
            )
        },
    )
    validation_dataset: str | None = field(
        default=None,
        metadata={
            "help": (
                "Source of the validation pairs when it differs from `dataset` (e.g. a .jsonl "
                "file)."
            )
        },
    )
    hub_config: str | None = field(
        default=None, metadata={"help": "Hub dataset configuration, if not the pair's."}
    )
    max_length: int = field(
        default=256, metadata={"help": "Drop training pairs longer than this many subword tokens."}
    )
    max_tokens: int = field(
        default=4096, metadata={"help": "Padded tokens per batch and process (each side)."}
    )
    target_tokens_per_update: int | None = field(
        default=None,
        metadata={
            "help": (
                "Set gradient accumulation so that an update covers about this many tokens over "
                "all processes (the papers: 25000); overrides --gradient_accumulation_steps."
            )
        },
    )
    max_train_pairs: int | None = field(
        default=None, metadata={"help": "Use only the first N training pairs."}
    )
    max_validation_pairs: int | None = field(
        default=None, metadata={"help": "Use only the first N validation pairs."}
    )
    add_language_tag: bool = field(
        default=False, metadata={"help": "Prefix sources with the <2xx> target tag."}
    )
    validation_bleu: bool = field(
        default=False,
        metadata={
            "help": ("Also decode the validation set at each evaluation and report BLEU (slower).")
        },
    )
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "Processes for tokenization."}
    )
    streaming: bool = field(
        default=False,
        metadata={
            "help": (
                "Read, tokenise and batch the training corpus as a stream (corpora too large to "
                "tokenise ahead, such as OPUS-100): the first update comes at once, memory stays "
                "bounded, and each checkpoint saves the stream position (stream_state.json), so "
                "--resume_from_checkpoint continues with the exact next batch."
            )
        },
    )
    stream_buffer_pairs: int = field(
        default=20_000,
        metadata={
            "help": (
                "Streaming: pairs tokenised, sorted by length and packed into batches together "
                "(memory grows with it; fewer mean more padding)."
            )
        },
    )
    max_unknown_share: float = field(
        default=UNKNOWN_SHARE_LIMIT,
        metadata={
            "help": (
                "Refuse to train when more than this share of a language's tokens are <unk> (the "
                "tokenizer cannot spell it: trained on other text); 1 trains anyway."
            )
        },
    )

    def __post_init__(self):
        for name in ("max_length", "max_tokens"):
            check_positive_int(getattr(self, name), f"--{name}")
        for name in (
            "target_tokens_per_update",
            "max_train_pairs",
            "max_validation_pairs",
            "preprocessing_num_workers",
        ):
            check_positive_int(getattr(self, name), f"--{name}", allow_none=True)
        check_positive_int(self.stream_buffer_pairs, "--stream_buffer_pairs")
        if not self.streaming and self.stream_buffer_pairs != DataArguments.stream_buffer_pairs:
            raise ValueError(
                "--stream_buffer_pairs sizes the windows of a stream: add --streaming, or drop it."
            )
        if self.streaming and self.max_train_pairs:
            raise ValueError(
                "--max_train_pairs takes the first pairs of a corpus loaded whole; a stream has "
                "no such prefix: drop --streaming, or --max_train_pairs."
            )
        check_finite_number(self.sampling_temperature, "--sampling_temperature", positive=True)
        check_finite_number(self.max_unknown_share, "--max_unknown_share", minimum=0)
        if self.more_datasets and not self.language_pairs:
            raise ValueError(
                "--more_datasets adds sources to a multilingual run: pass --language_pairs (e.g. "
                "en-de), or leave --more_datasets out (one direction trains on --dataset alone)."
            )


@dataclass
class TranslationTrainingArguments(Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` with the papers' recipe as defaults (Vaswani et al. 2017, §5; Xu
    et al. 2024, §3.1)."""

    learning_rate: float = field(
        default=5e-4,
        metadata={"help": "Peak learning rate (Vaswani et al.: d^-0.5 * warmup^-0.5)."},
    )
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam beta2 (papers: 0.98)."})
    adam_epsilon: float = field(default=1e-9, metadata={"help": "Adam epsilon (papers: 1e-9)."})
    weight_decay: float = field(
        default=0.0, metadata={"help": "No weight decay: AdamW then equals Adam."}
    )
    max_grad_norm: float = field(
        default=0.0, metadata={"help": "Gradient clipping norm; 0 disables (papers)."}
    )
    lr_scheduler_type: str = field(
        default="inverse_sqrt", metadata={"help": "Inverse square root after warm-up."}
    )
    warmup_steps: float = field(
        default=8000, metadata={"help": "Linear warm-up steps (papers: 8k)."}
    )
    max_steps: int = field(
        default=100_000, metadata={"help": "Updates (papers: 100k base, 300k big)."}
    )
    save_strategy: str = field(
        default="steps", metadata={"help": "Save checkpoints every save_steps."}
    )
    save_steps: float = field(
        default=1500, metadata={"help": "Checkpoint every N updates (papers: 1,500)."}
    )
    logging_steps: float = field(default=100, metadata={"help": "Log every N updates."})
    report_to: None | str | list[str] = field(
        default="none", metadata={"help": "Experiment trackers."}
    )
    generation_num_beams: int | None = field(
        default=4, metadata={"help": "Beam size for validation BLEU."}
    )
    output_dir: str | None = field(
        default=None, metadata={"help": "Where checkpoints and the final model go."}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": (
                "Train into a non-empty --output_dir, deleting what it holds first: the old "
                "run's checkpoints, final model and evaluations (refused otherwise)."
            )
        },
    )
    robt: float = field(
        default=0.0,
        metadata={
            "help": (
                "Multilingual: random online back-translation (Zhang et al. 2020): this share of "
                "each batch's pairs (x, y) also trains as (<2t> x', y), x' the current model's "
                "greedy translation of y into a random other language; 1 = every pair, as Zhang "
                "et al.; 0 = off. For a whole run, or as a fine-tuning stage from a trained "
                "model."
            )
        },
    )

    def __post_init__(self):
        if self.output_dir is None:
            raise ValueError(
                "Pass --output_dir: checkpoints and the final model are written there."
            )
        self._check_numbers()
        # a launch that went wrong is refused here; several CPU processes imply --use_cpu
        check_launch(self)
        if (self.bf16 or self.bf16_full_eval) and not torch.accelerator.is_available():
            features = cpu_features()
            if not features.native_bfloat16:
                raise ValueError(
                    "--bf16 would train several times slower than float32 on this CPU ("
                    f"{features.describe()}; "
                    "bfloat16 is fast only with AVX-512 BF16 or AMX): drop --bf16."
                )
            # transformers refuses --bf16 without an accelerator unless told --use_cpu; here the CPU
            # is all there is.
            self.use_cpu = True
        super().__post_init__()

    def _check_numbers(self):
        """Refuse values the Trainer would take silently (max_steps 0 runs one update, -5 trains by
        epochs) or fail on late (a ZeroDivisionError for no accumulation), and batch settings that
        token batching ignores."""
        if (
            isinstance(self.max_steps, bool)
            or not isinstance(self.max_steps, int)
            or not (self.max_steps >= 1 or self.max_steps == -1)
        ):
            raise ValueError(
                f"--max_steps must be a positive number of updates, or -1 to train for "
                f"--num_train_epochs epochs; got {self.max_steps!r}."
            )
        if self.max_steps == -1:
            check_finite_number(self.num_train_epochs, "--num_train_epochs", positive=True)
        elif (
            self.num_train_epochs
            != Seq2SeqTrainingArguments.__dataclass_fields__["num_train_epochs"].default
        ):
            raise ValueError(
                "--num_train_epochs has no effect while --max_steps is set (it is "
                f"{self.max_steps:,} "
                f"unless given): pass --max_steps -1 to train for {self.num_train_epochs:g} "
                "epochs, or "
                "leave --num_train_epochs out."
            )
        rate = self.learning_rate
        # NaN too (inf diverges, said)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
            raise ValueError(f"--learning_rate must be a positive number, got {rate!r}.")
        check_positive_int(self.gradient_accumulation_steps, "--gradient_accumulation_steps")
        check_positive_int(self.per_device_eval_batch_size, "--per_device_eval_batch_size")
        check_positive_int(self.generation_num_beams, "--generation_num_beams", allow_none=True)
        check_positive_int(self.generation_max_length, "--generation_max_length", allow_none=True)
        check_finite_number(self.max_grad_norm, "--max_grad_norm", minimum=0)
        check_finite_number(self.robt, "--robt", minimum=0)
        if self.robt > 1:
            raise ValueError(
                "--robt is the share of each batch's pairs back-translated, at most 1; got "
                f"{self.robt}."
            )
        for name in ("save_steps", "eval_steps"):
            value = getattr(self, name)
            if value is not None:
                check_finite_number(value, f"--{name}", positive=True)
        default_batch_size = Seq2SeqTrainingArguments.__dataclass_fields__[
            "per_device_train_batch_size"
        ].default
        if self.per_device_train_batch_size != default_batch_size or self.auto_find_batch_size:
            raise ValueError(
                "Training batches are made by token count here: --per_device_train_batch_size "
                "and --auto_find_batch_size have no effect. Set --max_tokens (padded tokens per "
                "batch and process) and --target_tokens_per_update instead."
            )


class TokenBatchSeq2SeqTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` whose training batches come from `TokenBatchSampler` (`max_tokens` padded
    tokens).

    The sampler already gives each process its own share, so the DataLoader is not passed through
    `accelerator.prepare`, whose `BatchSamplerShard` would split the shares again; the Trainer moves
    each batch to the device itself. `set_epoch` reaches the sampler through the loader (and through
    the `SkipBatchSampler` the Trainer wraps around it when it resumes mid-epoch).
    """

    def __init__(
        self,
        *args,
        max_tokens: int,
        sampling_temperature: float = 1.0,
        back_translation: RandomOnlineBackTranslation | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.max_tokens = max_tokens
        self.sampling_temperature = sampling_temperature
        self.back_translation = back_translation
        # (update, micro-batch within it): what ROBT's draws are seeded by
        self._micro_batch = (-1, 0)
        self._robt_interval = None  # (update, time) where ROBT's logged counts began

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        # batches come whole, in the stream's order
        if isinstance(self.train_dataset, StreamingTokenBatches):
            # A generator of its own: starting to iterate draws a seed from it, which from the
            # global RNG would shift the dropout of a resumed run (the Trainer restores the RNG
            # state before this loader is iterated).
            return DataLoader(
                self.train_dataset,
                batch_size=None,
                collate_fn=self.data_collator,
                num_workers=0,
                generator=torch.Generator(),
                pin_memory=self.args.dataloader_pin_memory and torch.accelerator.is_available(),
            )
        source_lengths, target_lengths = token_lengths(self.train_dataset)
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        # multilingual: temperature sampling over directions
        if "direction" in self.train_dataset.column_names:
            sampler = TemperatureTokenBatchSampler(
                source_lengths,
                target_lengths,
                self.train_dataset["direction"],
                self.max_tokens,
                temperature=self.sampling_temperature,
                num_replicas=self.args.world_size,
                rank=self.args.process_index,
                seed=seed,
            )
        else:
            sampler = TokenBatchSampler(
                source_lengths,
                target_lengths,
                self.max_tokens,
                num_replicas=self.args.world_size,
                rank=self.args.process_index,
                seed=seed,
            )
        dataset = self._remove_unused_columns(self.train_dataset, description="Training")
        return EpochDataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory and torch.accelerator.is_available(),
        )

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The Trainer's step, stopping at once when the loss is not finite (the Trainer's logging
        would show the mean of the finite losses, "loss 0", while every weight became NaN). Under
        fp16 a few overflows in a row are normal (the loss scaler skips those steps), so only
        `FP16_OVERFLOWS_ALLOWED` are tolerated. With ROBT the batch first gets its synthetic pairs
        (`back_translation`)."""
        if self.back_translation is not None:
            step = self.state.global_step
            self._robt_interval = self._robt_interval or (step, time.monotonic())
            self._micro_batch = (
                step,
                self._micro_batch[1] + 1 if self._micro_batch[0] == step else 0,
            )
            inputs = self.back_translation.extend(
                self.accelerator.unwrap_model(model),
                self._prepare_inputs(inputs),
                step,
                self.args.process_index,
                self._micro_batch[1],
            )
        loss = super().training_step(model, inputs, num_items_in_batch)
        if bool(torch.isfinite(loss)):
            self._overflows = 0
            return loss
        self._overflows = getattr(self, "_overflows", 0) + 1
        if not self.args.fp16 or self._overflows > FP16_OVERFLOWS_ALLOWED:
            raise TrainingDiverged(self.state.global_step + 1, float(loss), self.args)
        return loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """The Trainer's log, with ROBT's cost on each training log: `robt_pairs_per_update`
        (synthetic pairs, all processes), `robt_seconds_per_update` (this process's back-translation
        time) and `robt_time_share` (of the wall time since the last log)."""
        if self.back_translation is not None and "loss" in logs and self._robt_interval is not None:
            (first_step, started), now = self._robt_interval, time.monotonic()
            updates = max(1, self.state.global_step - first_step)
            pairs, seconds = self.back_translation.take_counts()
            pairs = int(
                self.accelerator.reduce(torch.tensor(pairs, device=self.args.device), "sum")
            )
            logs.update(
                robt_pairs_per_update=round(pairs / updates, 2),
                robt_seconds_per_update=round(seconds / updates, 4),
                robt_time_share=round(seconds / max(now - started, 1e-9), 4),
            )
            self._robt_interval = (self.state.global_step, now)
        super().log(logs, start_time)


FP16_OVERFLOWS_ALLOWED = 8


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: the message names the step and what to try."""

    def __init__(self, step: int, loss: float, args):
        checkpoints = complete_checkpoints(args.output_dir)
        earlier = (
            f"the last checkpoint is {checkpoints[-1]}"
            if checkpoints
            else "no checkpoint was saved before"
        )
        super().__init__(
            f"Training diverged at step {step}: the loss is {loss} and the weights are no longer "
            f"usable ({earlier}; nothing more is saved). Try a lower --learning_rate (now "
            f"{args.learning_rate:g}), more --warmup_steps (now {args.warmup_steps:g}) or "
            "--max_grad_norm 1.0, in a new --output_dir."
        )


class CheckpointRecordCallback(TrainerCallback):
    """After the Trainer has written a checkpoint: refuse one with non-finite weights, then add the
    run's arguments (`RUN_ARGUMENTS_NAME`, compared when resuming) and a checksum manifest,
    written last.

    `on_save` is the public hook that runs after `Trainer._save_checkpoint` has written every
    file."""

    def __init__(self, run_arguments: dict):
        self.run_arguments = run_arguments

    def on_save(self, args, state, control, model=None, **kwargs):
        checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()  # every rank has written its RNG state
        if model is not None:
            try:
                check_finite_weights(model, f"step {state.global_step}")
            except ValueError as error:
                if args.should_save:
                    # never leave a diverged checkpoint to resume
                    shutil.rmtree(checkpoint, ignore_errors=True)
                raise TrainingDiverged(state.global_step, float("nan"), args) from error
        if args.should_save and checkpoint.is_dir():
            atomic_write_json(checkpoint / RUN_ARGUMENTS_NAME, self.run_arguments)
            record_saved_folder(checkpoint)


class QuietProgressCallback(ProgressCallback):
    """The Trainer's progress bars without its printing of every log dict (`ReadableLogCallback`
    logs them)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        pass


class TimeEstimateCallback(TrainerCallback):
    """Say once, after the first `MEASURED_STEPS` updates (fewer in a short run), how long the run
    will take."""

    MEASURED_STEPS = 10

    def __init__(self):
        self.start = None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.start is None:
            self.start, self.first_step = time.perf_counter(), state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        # short runs too
        measured = max(1, min(self.MEASURED_STEPS, (state.max_steps - self.first_step) // 2))
        if self.start is None or state.global_step != self.first_step + measured:
            return
        per_step = (time.perf_counter() - self.start) / measured
        remaining = per_step * (state.max_steps - state.global_step)
        if state.is_world_process_zero:
            logger.info(
                "%.2f s per update: the remaining %d updates take about %s.%s",
                per_step,
                state.max_steps - state.global_step,
                _duration(remaining),
                " Consider a smaller model, --max_steps or a GPU." if remaining > 86400 else "",
            )


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.0f} minutes"


class EpochDataLoader(DataLoader):
    """A DataLoader that passes `set_epoch` on to its batch sampler (the Trainer calls it
    every epoch)."""

    def set_epoch(self, epoch: int):
        self.batch_sampler.set_epoch(epoch)


class ReadableLogCallback(TrainerCallback):
    """One plain line per log event ("step 300/100000 | loss 4.512 | lr 1.9e-04 | ..."), on the main process."""  # noqa: E501

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        parts = [f"step {state.global_step}/{state.max_steps}", f"epoch {state.epoch or 0:.2f}"]
        for key, value in logs.items():
            if key != "epoch":
                parts.append(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}")
        logger.info(" | ".join(parts))


class WallClockCallback(TrainerCallback):
    """Adds `wall_time` (seconds of training so far, over every resumed part of the run) to each log
    event, so that learning curves can be drawn against time. A resumed run continues from the last
    logged value; the time between that log event and the interruption is not counted (that work is
    redone)."""

    def on_train_begin(self, args, state, control, **kwargs):
        logged = [entry["wall_time"] for entry in state.log_history if "wall_time" in entry]
        self.offset = logged[-1] if logged else 0.0
        self.start = time.monotonic()

    def on_log(self, args, state, control, logs=None, **kwargs):
        wall_time = round(self.offset + time.monotonic() - self.start, 2)
        # the Trainer stored a copy of `logs` before calling back
        state.log_history[-1]["wall_time"] = wall_time
        if logs is not None:
            logs["wall_time"] = wall_time


def token_lengths(dataset) -> tuple[np.ndarray, np.ndarray]:
    """Source and target token counts of a tokenized dataset, read from Arrow without decoding the
    ids (NumPy arrays: 4.5M pairs' lengths as Python lists took 300 MB)."""
    table = dataset.select_columns(["input_ids", "labels"]).with_format("arrow")[:]
    return tuple(
        pc.list_value_length(table[name]).to_numpy().astype(np.int64)
        for name in ("input_ids", "labels")
    )


def build_model_and_tokenizer(model_args: ModelArguments, language_pairs: str | list[str] = ()):
    """(model, tokenizer): a fresh model from a config JSON file sized to the tokenizer, or a
    saved one.

    `language_pairs` ("en-de", or a list) are the directions of the run: a fresh config lists them
    before it is built (a language-aware model has a row of parameters per target language); a saved
    model keeps its own."""
    path = Path(model_args.model_name_or_path)
    tokenizer_path = model_args.tokenizer_name_or_path or model_args.model_name_or_path
    if path.suffix == ".json" and tokenizer_path == model_args.model_name_or_path:
        raise ValueError(
            "A fresh model from a config file needs --tokenizer_name_or_path "
            "(train one with scripts/train_tokenizer.py)."
        )
    tokenizer = load_saved_tokenizer(
        tokenizer_path,
        "--tokenizer_name_or_path" if model_args.tokenizer_name_or_path else "--model_name_or_path",
    )
    if path.suffix == ".json":
        settings = read_config_file(path)
        if settings.get("vocab_size", len(tokenizer)) != len(tokenizer):
            logger.info(
                "vocab_size %d of %s replaced by the tokenizer's %d.",
                settings["vocab_size"],
                path,
                len(tokenizer),
            )
        pairs = [language_pairs] if isinstance(language_pairs, str) else list(language_pairs)
        settings["language_pairs"] = list(
            dict.fromkeys([*settings.get("language_pairs", []), *pairs])
        )
        config = AutoConfig.for_model(
            settings.pop("model_type"), **{**settings, **tokenizer_model_kwargs(tokenizer)}
        )
        if model_args.config_overrides:
            apply_config_overrides(config, model_args.config_overrides)
        model = AutoModelForSeq2SeqLM.from_config(config)
    else:
        if model_args.config_overrides:
            raise ValueError(
                "--config_overrides applies to a fresh model from a config JSON file only."
            )
        model = load_saved_model(model_args.model_name_or_path, "--model_name_or_path")
        if model.config.vocab_size != len(tokenizer):
            raise ValueError(
                f"The model has {model.config.vocab_size} embeddings but the tokenizer "
                f"{len(tokenizer)} tokens: they do not belong together."
            )
        if path.is_dir():  # a tokenizer of the same size can still be another one
            check_tokenizer_fingerprint(
                path, json.loads(tokenizer.backend_tokenizer.to_str()), "--tokenizer_name_or_path"
            )
    return model, tokenizer


def read_config_file(path: str | Path) -> dict:
    """The settings of a model config JSON file (hub_configs/...), with a one-line error naming the
    file for a missing file, a JSON syntax error or a `model_type` that is not a known model
    type."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(
            f"Config file {path} is a folder; give a config JSON file (hub_configs/ lists the "
            "papers' "
            "models)."
        )
    if not path.is_file():
        raise ValueError(
            f"Config file {path} does not exist; hub_configs/ lists the papers' models."
        )
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"Config file {path} is not valid JSON ({error}).") from error
    if not isinstance(settings, dict) or "model_type" not in settings:
        raise ValueError(
            f"{path} has no `model_type`; it is not a model config (see hub_configs/)."
        )
    model_type = settings["model_type"]
    # transformers would list all of its several hundred model types
    if model_type not in CONFIG_MAPPING:
        family = list(CONFIG_MAPPING._extra_content)
        close = difflib.get_close_matches(str(model_type), family, n=1)
        raise ValueError(
            f"{path}: model_type {model_type!r} is not a known model type"
            f"{f' (did you mean {close[0]!r}?)' if close else ''}; this family's types: {family}."
        )
    check_config_fields(model_type, settings, str(path))
    return settings


# Keys a saved config.json holds besides the config's fields (a model's config.json may be used as a
# config file).
SAVED_CONFIG_KEYS = {
    "model_type",
    "architectures",
    "auto_map",
    "custom_pipelines",
    "transformers_version",
    "dtype",
    "torch_dtype",
    "_name_or_path",
}


def check_config_fields(model_type: str, settings: dict, where: str) -> None:
    """Refuse settings that no field of `model_type`'s config reads: a config would keep them as
    unused attributes, and the model would silently get the default instead ("num_layers" for
    "encoder_layers")."""
    config = AutoConfig.for_model(model_type)
    known = {*config.to_dict(), *type(config).attribute_map, *SAVED_CONFIG_KEYS}
    unknown = sorted(set(settings) - known)
    if unknown:
        fields = sorted(config.to_dict())  # suggest the field names, not their aliases
        close = {name: difflib.get_close_matches(name, fields, n=1, cutoff=0.6) for name in unknown}
        hints = "; ".join(
            f"{name!r} (did you mean {close[name][0]!r}?)" if close[name] else repr(name)
            for name in unknown
        )
        raise ValueError(
            f"{where}: {hints} {'is not a field' if len(unknown) == 1 else 'are not fields'} of "
            f"{model_type} configs, so the model would silently get the default. Use the field "
            "names of the config (docs/members.md)."
        )


def apply_config_overrides(config, overrides: str) -> None:
    """Apply "name=value,name=value" to `config`, each change checked, with a one-line error naming
    the bad one."""
    for item in (item.strip() for item in overrides.split(",")):
        name, equals, value = (part.strip() for part in item.partition("="))
        if not equals or not name:
            raise ValueError(
                f"--config_overrides: {item!r} is not name=value (e.g. "
                "'dropout=0.3,encoder_layers=12')."
            )
        if not hasattr(config, name):
            raise ValueError(
                f"--config_overrides: {config.model_type} configs have no field {name!r}."
            )
        current = getattr(config, name)
        if name == "language_pairs":
            raise ValueError(
                "--config_overrides: language_pairs are the run's directions, which training "
                "writes into the config itself: give them as --language_pairs (or "
                "--source_lang/--target_lang), and drop language_pairs from --config_overrides."
            )
        # no type to convert to (transformers refuses): a JSON value, else the text as it is
        if current is None:
            try:
                setattr(config, name, json.loads(value))
            except json.JSONDecodeError:
                setattr(config, name, value)
            continue
        if not isinstance(current, (bool, int, float, str)):
            raise ValueError(
                f"--config_overrides sets numbers, booleans and strings; {name} is a "
                f"{type(current).__name__}: set it in the config JSON file instead."
            )
        try:
            config.update_from_string(f"{name}={value}")
        except ValueError as error:
            kind = type(current).__name__
            raise ValueError(
                f"--config_overrides: {name}={value!r} is not a valid {kind} ({error})."
            ) from error
    config.check_values()


def gradient_accumulation_for(target_tokens: int, max_tokens: int, world_size: int) -> int:
    """Accumulation steps so that `world_size` processes of `max_tokens`-token batches reach
    `target_tokens`."""
    return max(1, math.ceil(target_tokens / (max_tokens * world_size)))


def _resolve_resume(
    training_args: TranslationTrainingArguments, sources: dict | None = None
) -> str | None:
    """`resume_from_checkpoint`: None, "last"/"true" (newest complete checkpoint) or a
    checkpoint path.

    Also claims and prepares `output_dir` before any work: a new run needs it empty (or
    --overwrite_output_dir, which deletes the old run's checkpoints, unless `sources` (flag -> path)
    are inside them), and it must be writable.
    """
    check_ranks_agree(training_args)  # before any process takes itself for the main one
    if training_args.should_save:
        # first: another run still writing there is refused at once
        claim_output_dir(training_args.output_dir)
    requested = training_args.resume_from_checkpoint
    if requested is not None and training_args.overwrite_output_dir:
        raise ValueError(
            "--resume_from_checkpoint continues the run in --output_dir, --overwrite_output_dir "
            "deletes it: give one of them."
        )
    checkpoints = complete_checkpoints(training_args.output_dir)
    existing = checkpoints[-1] if checkpoints else None
    if requested is None:
        if existing is not None and not training_args.overwrite_output_dir:
            finished = (Path(training_args.output_dir) / "train_results.json").is_file()
            raise ValueError(
                f"{training_args.output_dir} already holds checkpoints of a run ({existing.name}"
                f"{'; it finished' if finished else ''}). Pass --resume_from_checkpoint last to "
                "continue "
                f"it{' with a larger --max_steps' if finished else ''}, --overwrite_output_dir "
                "to start "
                "again there, or choose another --output_dir."
            )
        if training_args.should_save:
            prepare_output_dir(training_args.output_dir, training_args.overwrite_output_dir)
            old_checkpoints = list(
                Path(training_args.output_dir).glob(f"{PREFIX_CHECKPOINT_DIR}-*")
            )
            _check_sources_kept(old_checkpoints, sources or {})
            # Everything of the old run goes, not only its checkpoints (which must not be resumed or
            # averaged with this run's): its final model would otherwise stand beside this run's
            # checkpoints until the end, and be loaded as this run's if it stops early.
            clear_output_dir(
                training_args.output_dir,
                sources,
                deletable=lambda entry: entry.name.startswith(f"{PREFIX_CHECKPOINT_DIR}-"),
            )
        return None
    if training_args.should_save:
        prepare_output_dir(training_args.output_dir, overwrite=True)
    if str(requested).lower() in ("last", "true"):
        if existing is None:
            raise ValueError(
                f"--resume_from_checkpoint {requested}: {training_args.output_dir} has no "
                "complete checkpoint."
            )
        requested = _newest_recorded(checkpoints)
    elif not (Path(requested) / "trainer_state.json").is_file():
        raise ValueError(
            f"--resume_from_checkpoint {requested}: not a complete checkpoint (no "
            "trainer_state.json)."
        )
    check_resumable(Path(requested), training_args.output_dir)
    check_steps_left(Path(requested), training_args.max_steps)
    return str(requested)


def check_steps_left(checkpoint: Path, max_steps: int) -> None:
    """Refuse to resume a checkpoint that already has `max_steps` updates: the Trainer would train
    none and save the checkpoint's model as the final model of a shorter run, without a word."""
    try:
        done = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))[
            "global_step"
        ]
    except (OSError, ValueError, KeyError, TypeError):
        return  # an unreadable state is named when the Trainer loads it
    if max_steps > 0 and done >= max_steps:
        raise ValueError(
            f"--resume_from_checkpoint {checkpoint.name}: it has {done} updates already, as many "
            f"as --max_steps {max_steps} or more, so nothing would be trained. Pass a larger "
            f"--max_steps to continue the run; the model at step {done} is the checkpoint itself."
        )


def _newest_recorded(checkpoints: list[Path]) -> Path:
    """The newest checkpoint with its manifest: a run killed while writing one leaves the checkpoint
    before it whole (said in the log). Without any, the newest (`check_resumable` then says what
    to do)."""
    recorded = [checkpoint for checkpoint in checkpoints if (checkpoint / CHECKSUMS_NAME).is_file()]
    if recorded and recorded[-1] != checkpoints[-1]:
        logger.warning(
            "Resuming from %s: the newer %s has no %s (deleted, or the run stopped while writing "
            "it).",
            recorded[-1].name,
            checkpoints[-1].name,
            CHECKSUMS_NAME,
        )
        return recorded[-1]
    return checkpoints[-1]


def _check_sources_kept(old_checkpoints: list[Path], sources: dict) -> None:
    """Refuse to delete an old checkpoint that holds the model or tokenizer this run starts from."""
    for checkpoint in old_checkpoints:
        for flag, source in sources.items():
            if (
                source
                and Path(source).exists()
                and checkpoint.resolve()
                in (Path(source).resolve(), *Path(source).resolve().parents)
            ):
                raise ValueError(
                    f"{flag} {source} is in {checkpoint}, which --overwrite_output_dir deletes "
                    "before "
                    "training: copy it out of --output_dir first, or train into another "
                    "--output_dir."
                )


# What resuming reads besides the weights and trainer_state.json; the Trainer silently starts afresh
# without them. Each entry: the file's name, then its names under FSDP (the optimizer state whole,
# or one folder of shards).
RESUME_STATE_FILES = (("optimizer.pt", "optimizer.bin", "optimizer_0"), ("scheduler.pt",))


def check_resumable(checkpoint: Path, output_dir: str) -> None:
    """Refuse a checkpoint that would resume as another run than the one saved, without a word from
    the Trainer: the run folder itself (its final model, no optimizer state), a checkpoint without
    its manifest (its files cannot be verified) or without the optimizer, schedule or RNG state (a
    fresh optimizer, warm-up again, other dropout)."""
    name = f"--resume_from_checkpoint {checkpoint}"
    checkpoints = complete_checkpoints(checkpoint)
    if checkpoint.resolve() == Path(output_dir).resolve() or checkpoints:
        newest = f" (its newest: {checkpoints[-1].name})" if checkpoints else ""
        raise ValueError(
            f"{name} is a run folder, not one of its checkpoints{newest}: pass "
            "--resume_from_checkpoint last or a checkpoint-N folder; to train its final model "
            f"further, start a new run with --model_name_or_path {checkpoint} in a new "
            "--output_dir."
        )
    if not (checkpoint / CHECKSUMS_NAME).is_file():
        raise ValueError(
            f"{name} has no {CHECKSUMS_NAME}, so its files cannot be verified (the file was "
            "deleted, or the checkpoint was not completely written). If you trust them, record "
            f"them with {RECORD_COMMAND} {checkpoint}, then resume again; otherwise resume an "
            "earlier checkpoint."
        )
    missing = [
        names[0]
        for names in RESUME_STATE_FILES
        if not any((checkpoint / name).exists() for name in names)
    ]
    missing += [] if list(checkpoint.glob("rng_state*.pth")) else ["rng_state.pth"]
    missing += (
        []
        if (checkpoint / WEIGHTS_NAME).is_file() or (checkpoint / WEIGHTS_INDEX_NAME).is_file()
        else [WEIGHTS_NAME]
    )
    if missing:
        raise ValueError(
            f"{name} lacks {', '.join(missing)}: resuming would silently restart the optimizer, "
            "the "
            "learning-rate schedule or the random state, i.e. another run. Restore the files, "
            "resume an "
            "earlier checkpoint, or start a new run from its weights (--model_name_or_path "
            f"{checkpoint}) "
            "in a new --output_dir."
        )
    verify_checksums(checkpoint)


# Settings that a resumed run cannot change: the checkpoint's optimizer, schedule and batch order
# win (the change would have no effect) or exact resuming breaks. max_steps, saving, logging and
# evaluation may change.
FIXED_WHEN_RESUMING = (
    "model_name_or_path",
    "tokenizer_name_or_path",
    "config_overrides",
    "dataset",
    "source_lang",
    "target_lang",
    "train_split",
    "hub_config",
    "max_length",
    "max_tokens",
    "target_tokens_per_update",
    "max_train_pairs",
    "add_language_tag",
    "learning_rate",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "weight_decay",
    "max_grad_norm",
    "lr_scheduler_type",
    "warmup_steps",
    "seed",
    "data_seed",
    "gradient_accumulation_steps",
    "optim",
    "fp16",
    "bf16",
    "streaming",
    "stream_buffer_pairs",
    "robt",
)


def run_arguments(model_args, data_args, training_args) -> dict:
    """The settings in `FIXED_WHEN_RESUMING`, as JSON values (saved in every checkpoint)."""
    values = {**asdict(model_args), **asdict(data_args)}
    values.update(
        {
            name: getattr(training_args, name)
            for name in FIXED_WHEN_RESUMING
            if hasattr(training_args, name)
        }
    )
    return json.loads(
        json.dumps(
            {name: values[name] for name in FIXED_WHEN_RESUMING if name in values}, default=str
        )
    )


def check_resume_matches(checkpoint: str, arguments: dict, model) -> None:
    """Refuse to resume `checkpoint` with other settings or another model size than it was
    saved with."""
    checkpoint = Path(checkpoint)
    recorded_path = checkpoint / RUN_ARGUMENTS_NAME
    if recorded_path.is_file():
        recorded = json.loads(recorded_path.read_text(encoding="utf-8"))
        changed = [
            name
            for name in recorded
            if name in arguments and _differs(recorded[name], arguments[name])
        ]
        if changed:
            before = ", ".join(
                _recorded_value(name, recorded[name], arguments[name]) for name in changed
            )
            now = ", ".join(
                f"{name}={arguments[name]}"
                for name in changed
                if not isinstance(arguments[name], dict)
            )
            raise ValueError(
                f"--resume_from_checkpoint {checkpoint.name}: it was trained with {before} but "
                f"this command gives {now or 'another one'}."
                f"{DATA_CHANGED if 'training_data' in changed else ''} A resumed run keeps the "
                "checkpoint's optimizer, schedule and batches, so pass the same values, or "
                f"start a new run from its weights (--model_name_or_path {checkpoint}) in a new "
                "--output_dir."
            )
    weights_path = checkpoint / WEIGHTS_NAME
    if weights_path.is_file():
        shapes = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
        with safe_open(weights_path, framework="pt") as weights:
            for name in weights.keys():
                saved = tuple(weights.get_slice(name).get_shape())
                if name in shapes and shapes[name] != saved:
                    raise ValueError(
                        f"--resume_from_checkpoint {checkpoint.name} holds another model size ("
                        f"{name} is {saved} "
                        f"there, {shapes[name]} here): resume with the run's own "
                        "--model_name_or_path and "
                        "--config_overrides, or train into a new --output_dir."
                    )


DATA_CHANGED = (
    " The training corpus (or the tokenizer) changed since the checkpoint was saved: restore it "
    "to resume this run."
)


def _differs(recorded, current) -> bool:
    # a config: another transformers may add fields
    if isinstance(recorded, dict) and isinstance(current, dict):
        return bool(config_changes(recorded, current))
    return recorded != current


def _recorded_value(name: str, recorded, current) -> str:
    # a config: name the fields that changed
    if isinstance(recorded, dict) and isinstance(current, dict):
        return f"another {name} ({describe_changes(recorded, current)})"
    return f"{name}={recorded}"


def run_fingerprints(model, train_dataset) -> dict:
    """What a checkpoint records besides the arguments, compared when resuming: the model's config
    (a config file edited in place keeps its path) and a digest of the tokenized training data (a
    corpus changed in place too)."""
    data = (
        train_dataset.fingerprint
        if isinstance(train_dataset, StreamingTokenBatches)
        else training_data_fingerprint(train_dataset)
    )
    return {"model_config": architecture(model.config.to_dict()), "training_data": data}


def training_data_fingerprint(dataset) -> str:
    """ "N pairs, token ids sha256 ..." over the source and target ids in order, chunk by chunk (the
    same however Arrow chunked them; a few seconds for WMT14's 4.5M pairs, once per run)."""
    table = dataset.select_columns(["input_ids", "labels"]).with_format("arrow")[:]
    # two streams: each is the hash of its concatenation
    lengths, ids = hashlib.sha256(), hashlib.sha256()
    for name in ("input_ids", "labels"):
        for chunk in table[name].chunks:
            lengths.update(
                pc.list_value_length(chunk).to_numpy(zero_copy_only=False).astype("int32").tobytes()
            )
            ids.update(chunk.flatten().to_numpy(zero_copy_only=False).astype("int32").tobytes())
    digest = hashlib.sha256(lengths.digest() + ids.digest()).hexdigest()
    return f"{len(dataset)} pairs, token ids sha256 {digest[:16]}"


def load_tokenized_split(
    data_args: DataArguments,
    tokenizer,
    split: str,
    source: str,
    max_pairs: int | None,
    max_length: int | None,
):
    pairs = load_parallel_corpus(
        source,
        data_args.source_lang,
        data_args.target_lang,
        split,
        max_pairs=max_pairs,
        hub_config=data_args.hub_config,
    )
    return tokenize_pairs(
        pairs,
        tokenizer,
        data_args.source_lang,
        data_args.target_lang,
        max_length=max_length,
        add_language_tag=data_args.add_language_tag,
        num_proc=data_args.preprocessing_num_workers,
    )


@releasing_output_dirs
def train_translation(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TranslationTrainingArguments,
    callbacks: list[TrainerCallback] | None = None,
) -> TokenBatchSeq2SeqTrainer:
    """Train (or resume) a translation model and save it in `training_args.output_dir`; return the
    Trainer.

    The final model, tokenizer and generation config land in `output_dir`, checkpoints in its
    ``checkpoint-N`` folders, a readable log in ``train.log``. `callbacks` are added to the
    Trainer's.
    """
    if training_args.label_smoothing_factor:
        raise ValueError(
            "Leave --label_smoothing_factor at 0: the model applies its config's `label_smoothing`"
            " (0.1 by default); set it with --config_overrides label_smoothing=..."
        )
    set_threads(model_args.threads)
    resume = _resolve_resume(
        training_args,
        {
            "--model_name_or_path": model_args.model_name_or_path,
            "--tokenizer_name_or_path": model_args.tokenizer_name_or_path,
            "--dataset": data_args.dataset,
        },
    )
    _log_to_file(training_args)
    set_seed(training_args.seed)
    if data_args.language_pairs:
        return _train_multilingual(model_args, data_args, training_args, resume, callbacks)
    if not data_args.source_lang or not data_args.target_lang:
        raise ValueError(
            "Pass --source_lang and --target_lang (one direction), or --language_pairs (several)."
        )
    language_pair = f"{data_args.source_lang}-{data_args.target_lang}"
    if training_args.robt:
        raise ValueError(
            "--robt back-translates into the model's other target languages: it is for "
            "multilingual training (--language_pairs)."
        )
    model, tokenizer = build_model_and_tokenizer(model_args, language_pair)
    with training_args.main_process_first(desc="loading and tokenizing the data"):
        if data_args.streaming:
            check_language_tag(tokenizer, data_args.target_lang, data_args.add_language_tag)
            sources = [(data_args.dataset, [(data_args.source_lang, data_args.target_lang)])]
            train_dataset = training_stream(
                sources, tokenizer, data_args, training_args, data_args.add_language_tag
            )
        else:
            train_dataset = load_tokenized_split(
                data_args,
                tokenizer,
                data_args.train_split,
                data_args.dataset,
                data_args.max_train_pairs,
                data_args.max_length,
            )
        eval_dataset = None
        if data_args.validation_split or data_args.validation_dataset:
            eval_dataset = load_tokenized_split(
                data_args,
                tokenizer,
                data_args.validation_split or "validation",
                data_args.validation_dataset or data_args.dataset,
                data_args.max_validation_pairs,
                None,
            )
    return _train(
        model,
        tokenizer,
        train_dataset,
        eval_dataset,
        model_args=model_args,
        data_args=data_args,
        training_args=training_args,
        resume=resume,
        callbacks=callbacks,
        target_lang=data_args.target_lang,
    )


def _train_multilingual(model_args, data_args, training_args, resume, callbacks):
    """Many directions at once: tagged sources, temperature sampling, a validation loss per
    direction."""
    if data_args.source_lang or data_args.target_lang:
        raise ValueError(
            "--language_pairs replaces --source_lang/--target_lang: pass one or the other."
        )
    if data_args.validation_dataset:
        raise ValueError(
            "--validation_dataset is for one direction; multilingual validation reads "
            "--validation_split of each training source."
        )
    with training_args.main_process_first(desc="loading and tokenizing the data"):
        sources = parse_sources(
            data_args.dataset,
            data_args.language_pairs,
            data_args.more_datasets or (),
            data_args.train_split,
        )
        names = [pair_name(direction) for _, directions in sources for direction in directions]
        # a language-aware model needs them built in
        model, tokenizer = build_model_and_tokenizer(model_args, names)
        add_language_pairs(model.config, names)

        def load(split, max_pairs, max_length):
            corpus = load_multilingual_corpus(
                sources, split, max_pairs=max_pairs, hub_config=data_args.hub_config
            )
            return tokenize_directions(
                corpus, tokenizer, max_length, num_proc=data_args.preprocessing_num_workers
            )

        if data_args.streaming:
            check_language_tags(
                tokenizer, {target for _, directions in sources for _, target in directions}
            )
            train_dataset = training_stream(
                sources, tokenizer, data_args, training_args, add_language_tag=True
            )
        else:
            train_dataset = load(
                data_args.train_split, data_args.max_train_pairs, data_args.max_length
            )
        eval_dataset = None
        if data_args.validation_split:
            eval_dataset = split_by_direction(
                load(data_args.validation_split, data_args.max_validation_pairs, None)
            )
    back_translation = None
    if training_args.robt:
        back_translation = RandomOnlineBackTranslation(
            training_args.robt,
            language_tag_ids(tokenizer),
            model.config.target_languages,
            tokenizer.pad_token_id,
            tokenizer.eos_token_id,
            seed=training_args.seed,
            max_length=data_args.max_length or 256,
        )
    return _train(
        model,
        tokenizer,
        train_dataset,
        eval_dataset,
        model_args=model_args,
        data_args=data_args,
        training_args=training_args,
        resume=resume,
        callbacks=callbacks,
        target_lang=None,
        back_translation=back_translation,
    )


def add_language_pairs(config, names: list[str]) -> None:
    """List the run's directions in `config.language_pairs`; a language-aware model's target
    languages (the rows of its parameters) cannot change."""
    before = config.target_languages
    config.language_pairs = list(dict.fromkeys([*config.language_pairs, *names]))
    if config.language_aware and config.target_languages != before:
        raise ValueError(
            f"The model has language-aware parameters for the target languages {before}; the "
            "directions "
            f"{names} add {sorted(set(config.target_languages) - set(before))}, which it has no "
            "parameters "
            "for. Train the new target languages into a new model (a config file), or leave them "
            "out."
        )


def training_stream(
    sources,
    tokenizer,
    data_args: DataArguments,
    training_args: TranslationTrainingArguments,
    add_language_tag: bool,
) -> StreamingTokenBatches:
    """The training pairs of `sources` ([(source, directions)]) as a stream of token batches (see
    `streaming`)."""
    if training_args.dataloader_num_workers:
        raise ValueError(
            "--streaming reads, tokenises and batches in the training process, where the stream "
            "position is kept for the checkpoints: leave --dataloader_num_workers at 0."
        )
    directions = stream_directions(sources, data_args.train_split, data_args.hub_config)
    seed = training_args.data_seed if training_args.data_seed is not None else training_args.seed
    settings = {
        "max_length": data_args.max_length,
        "add_language_tag": add_language_tag,
        "seed": seed,
        "sampling_temperature": data_args.sampling_temperature,
        "max_tokens": data_args.max_tokens,
        "buffer_pairs": data_args.stream_buffer_pairs,
    }
    logger.info(
        "Streaming %d direction(s), %d pairs in all, in windows of %d pairs.",
        len(directions),
        sum(direction.pairs for direction in directions),
        data_args.stream_buffer_pairs,
    )
    return StreamingTokenBatches(
        pair_stream(directions, data_args.sampling_temperature, seed),
        tokenizer,
        data_args.max_tokens,
        max_length=data_args.max_length,
        add_language_tag=add_language_tag,
        buffer_pairs=data_args.stream_buffer_pairs,
        seed=seed,
        num_replicas=training_args.world_size,
        rank=training_args.process_index,
        fingerprint=stream_fingerprint(directions, tokenizer, settings),
        stream_pairs=sum(direction.pairs for direction in directions),
    )


class StreamStateCallback(TrainerCallback):
    """Save the stream position in each checkpoint (before its checksum manifest is written), so
    that resuming continues with the next batch instead of the stream's start."""

    def __init__(self, stream: StreamingTokenBatches):
        self.stream = stream

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if args.should_save and checkpoint.is_dir():
            atomic_write_json(checkpoint / STREAM_STATE_FILE, self.stream.state_dict())


def _resume_stream(stream: StreamingTokenBatches, checkpoint: str) -> None:
    path = Path(checkpoint) / STREAM_STATE_FILE
    if not path.is_file():
        raise ValueError(
            f"--resume_from_checkpoint {checkpoint} has no {STREAM_STATE_FILE}: it was not saved "
            "by a "
            "--streaming run, so the stream position is unknown. Resume it without --streaming, "
            "or start "
            "a new run from its weights (--model_name_or_path)."
        )
    stream.load_state_dict(json.loads(path.read_text(encoding="utf-8")))


def _train(
    model,
    tokenizer,
    train_dataset,
    eval_dataset,
    *,
    model_args,
    data_args,
    training_args,
    resume,
    callbacks,
    target_lang,
    back_translation=None,
):
    """The shared second half of bilingual and multilingual training: checks, the Trainer, the
    final save."""
    streaming = isinstance(train_dataset, StreamingTokenBatches)
    # the first window stands for the stream: a tokenizer that cannot spell it shows there
    if streaming:
        check_unknown_tokens(
            train_dataset.first_window(),
            tokenizer,
            data_args.max_unknown_share,
            (data_args.source_lang, data_args.target_lang),
            flag="--max_unknown_share",
        )
        # the stream resumes at its saved position; skipping would re-read
        training_args.ignore_data_skip = True
    else:
        check_unknown_tokens(
            train_dataset,
            tokenizer,
            data_args.max_unknown_share,
            (data_args.source_lang, data_args.target_lang),
            flag="--max_unknown_share",
        )
    if data_args.target_tokens_per_update:
        training_args.gradient_accumulation_steps = gradient_accumulation_for(
            data_args.target_tokens_per_update, data_args.max_tokens, training_args.world_size
        )
    if data_args.validation_bleu:
        if eval_dataset is None:
            raise ValueError("--validation_bleu needs validation data: pass --validation_split.")
        training_args.predict_with_generate = True
    logger.info(
        "Model: %s, %.2fM parameters; %s training pairs; %d-token batches x %d accumulation x %d "
        "processes; on %s.",
        model.config.model_type,
        model.num_parameters() / 1e6,
        "streamed" if streaming else len(train_dataset),
        data_args.max_tokens,
        training_args.gradient_accumulation_steps,
        training_args.world_size,
        describe_device(training_args.device),
    )
    arguments = {
        **run_arguments(model_args, data_args, training_args),
        **run_fingerprints(model, train_dataset),
    }
    if resume is not None:
        check_resume_matches(resume, arguments, model)
        if streaming:
            _resume_stream(train_dataset, resume)
    trainer = TokenBatchSeq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        compute_metrics=translation_compute_metrics(tokenizer, target_lang=target_lang)
        if data_args.validation_bleu
        else None,
        callbacks=[
            WallClockCallback(),
            ReadableLogCallback(),
            *([StreamStateCallback(train_dataset)] if streaming else []),
            CheckpointRecordCallback(arguments),
            TimeEstimateCallback(),
            ShardedLayersCallback(),
            *(callbacks or []),
        ],
        max_tokens=data_args.max_tokens,
        sampling_temperature=data_args.sampling_temperature,
        back_translation=back_translation,
    )
    # One line per log event: ReadableLogCallback's, not also the Trainer's printed dict.
    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(QuietProgressCallback)
    try:
        result = trainer.train(resume_from_checkpoint=resume)
        check_finite_weights(model, f"The model after step {trainer.state.global_step}")
        trainer.save_model()
        trainer.log_metrics("train", result.metrics)
        trainer.save_metrics("train", result.metrics)
        # trainer_state.json with the whole log history, beside the final model
        trainer.save_state()
        if training_args.should_save:
            record_saved_folder(training_args.output_dir)
    # torch and the Rust writers report a full disk with errors of their own
    except Exception as error:
        if not is_no_space_error(error):
            raise
        raise DiskFull(
            errno.ENOSPC, _no_space_message(training_args.output_dir, trainer.state.global_step)
        ) from error
    return trainer


def describe_device(device: torch.device) -> str:
    """What a training log says the run trains on: "cpu", or "cuda:0 (NVIDIA H200)" with the
    GPU's name."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def _no_space_message(output_dir: str, step: int) -> str:
    """Say that the disk is full, remove the unfinished checkpoint (it frees space), name the
    intact one."""
    unfinished = Path(output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{step}"
    if unfinished.is_dir() and not all(
        (unfinished / name).is_file() for name in ("trainer_state.json", CHECKSUMS_NAME)
    ):
        # its manifest comes last: without it, it is not whole
        shutil.rmtree(unfinished, ignore_errors=True)
    checkpoints = complete_checkpoints(output_dir)
    intact = (
        f"the earlier checkpoint {checkpoints[-1]} is intact: free space, then "
        "--resume_from_checkpoint last"
        if checkpoints
        else "no earlier checkpoint exists"
    )
    return f"No space left on the device while saving step {step} in {output_dir}; {intact}."


def _log_to_file(training_args: TranslationTrainingArguments):
    """Progress lines to stderr and to `output_dir/train.log` (main process), readable without
    TensorBoard."""
    if not training_args.should_log:
        return
    os.makedirs(training_args.output_dir, exist_ok=True)
    package_logger = logging.getLogger(__package__)
    package_logger.setLevel(logging.INFO)
    for handler in [h for h in package_logger.handlers if getattr(h, "is_training_log", False)]:
        package_logger.removeHandler(handler)  # a previous run's log file, in the same process
        handler.close()
    handlers = [logging.FileHandler(os.path.join(training_args.output_dir, "train.log"))]
    # a root handler (logging.basicConfig) already shows each line once
    if not logging.getLogger().handlers:
        handlers.append(TqdmLoggingHandler())
    for handler in handlers:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.is_training_log = True
        package_logger.addHandler(handler)


class TqdmLoggingHandler(logging.StreamHandler):
    """Log lines written above the progress bar (through tqdm) instead of through it."""

    def emit(self, record):
        try:
            tqdm.write(self.format(record), file=self.stream)
        # logging must never raise; the standard handlers do the same
        except Exception:  # noqa: BLE001
            self.handleError(record)


def parse_training_arguments(args: list[str] | None = None):
    """(ModelArguments, DataArguments, TranslationTrainingArguments) from the command line (or
    `args`)."""
    parser = HfArgumentParser((ModelArguments, DataArguments, TranslationTrainingArguments))
    return parser.parse_args_into_dataclasses(args=args)


__all__ = [
    "ModelArguments",
    "DataArguments",
    "TranslationTrainingArguments",
    "TokenBatchSeq2SeqTrainer",
    "train_translation",
    "build_model_and_tokenizer",
    "parse_training_arguments",
    "gradient_accumulation_for",
    "apply_config_overrides",
    "TrainingDiverged",
]
