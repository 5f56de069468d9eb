"""The GPU measured in one command (`scripts/gpu_benchmark.py`): bf16 training and decoding of the
family against `MarianMTModel`, in a few minutes, with nothing to install beyond torch and
transformers.

- training: source + target tokens per second and MFU of every member and of Marian, under one set
  of Trainer settings (`trainer_arguments`: bf16, fused AdamW, the Trainer's defaults otherwise) at
  the papers' batch size (Xu et al. 2024: about 25k target tokens per batch; here 25,088 target
  tokens in one step, no accumulation), in eager mode and compiled (the Trainer's `torch_compile`).
  Through `Seq2SeqTrainer` where accelerate is installed (the Trainer needs it), else through the
  same step written out (`HandTrainer`: bf16 autocast, fused AdamW, gradient clipping at 1.0,
  `torch.compile`), and the report says which;
- decoding: beam 4 and greedy of the base models and of Xu et al. 2024's Table 6 pair (12+12
  depth-wise LSTM against the 24+24 residual pre-norm model), in the precision
  `prepare_for_inference(precision="auto")` takes (bfloat16 on a GPU), with the end-of-sentence
  token forbidden so that every model emits the same tokens. Eager only: compiled decoding steps are
  being reworked.

MFU is the training step's FLOPs (`speed.training_flops`) per second over the GPU's bfloat16 matmul
peak, both the one measured here (a square matmul) and the nominal dense peak of the models in
`NOMINAL_BF16_PEAKS`. Compiling takes most of the time: compiled rows run last, in `members` order,
while `budget_s` lasts; the rest are reported as not measured. `dry_run` runs every row on tiny
models (on the CPU unless a GPU is there; the compiled rows with the "eager" backend) to check the
command, not to measure.
"""

import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import (
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    default_data_collator,
)
from transformers.utils import is_accelerate_available

from modeling_dwlstm.precision import prepare_for_inference

from .speed import (
    DEPTH_PAIR,
    MARIAN,
    SIZES,
    build_model,
    generate_forced,
    interleaved_times,
    matmul_peak_flops,
    random_batch,
    registered_members,
    synchronize,
    training_flops,
)

PAPER_TARGET_TOKENS = 25_000  # Xu et al. 2020, 2024: batches of about 25k target tokens
# Dense bfloat16 tensor-core peaks (FLOP/s) from the vendors' data sheets, by a part of the
# device name.
NOMINAL_BF16_PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}
FIRST_COMPILED = ("dwlstm", "residual-prenorm", MARIAN)  # compiled first, while the budget lasts
TINY = dict(d_model=32, encoder_layers=2, decoder_layers=2, heads=2, ffn_dim=64)
TINY_PAIR = {
    "dwlstm": dict(encoder_layers=2, decoder_layers=2),
    "residual-prenorm": dict(encoder_layers=4, decoder_layers=4),
}


@dataclass
class GpuBenchmarkSettings:
    members: tuple | None = None  # None: every registered member, plus Marian
    size: str = "base"  # a key of speed.SIZES (6+6 layers; in a dry run replaced by TINY's shape)
    length: int = 64  # tokens per source and per target sentence
    target_tokens: int = PAPER_TARGET_TOKENS  # per training batch (rounded down to whole sentences)
    warmup_steps: int = 3  # untimed training steps (the compiled rows compile in the first)
    timed_steps: int = 10
    compiled: bool = True  # also the compiled training rows
    generation_batch: int = 64  # source sentences per generate() call
    source_length: int = 20
    new_tokens: int = 24  # forced: every model emits exactly this many tokens
    decode_repeats: int = 3
    budget_s: float = 240.0  # compiled rows start only while the run is within this many seconds
    vocab_size: int = 32000
    # tiny models, few steps, "eager" compile backend: checks the command, measures nothing
    dry_run: bool = False
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")

    def check(self):
        if self.size not in SIZES:
            raise ValueError(f"Unknown size {self.size!r}; choose from {sorted(SIZES)}.")
        known = registered_members()
        if self.members is not None and set(self.members) - set(known) - {MARIAN}:
            raise ValueError(
                f"Unknown members {sorted(set(self.members) - set(known) - {MARIAN})}; registered: "
                f"{sorted(known)} and {MARIAN}."
            )
        for name in (
            "length",
            "target_tokens",
            "timed_steps",
            "generation_batch",
            "new_tokens",
            "decode_repeats",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.target_tokens < self.length:
            raise ValueError(
                f"target_tokens ({self.target_tokens}) must hold one sentence of length "
                f"{self.length}."
            )
        if self.device == "cpu" and not self.dry_run:
            raise ValueError(
                "No CUDA device: the GPU benchmark measures a GPU. Use dry_run (--dry_run) to "
                "check the command on the CPU."
            )

    @classmethod
    def tiny(cls, **overrides) -> "GpuBenchmarkSettings":
        """The dry run's settings: tiny models, lengths and batches."""
        values = dict(
            length=8,
            target_tokens=64,
            warmup_steps=1,
            timed_steps=2,
            generation_batch=4,
            source_length=6,
            new_tokens=4,
            decode_repeats=1,
            vocab_size=256,
            dry_run=True,
        )
        return cls(**{**values, **overrides})


class RepeatedRows(Dataset):
    """The rows of one random batch, `steps` times over: every training step sees a full batch of
    fixed shape."""

    def __init__(self, batch: dict, steps: int):
        self.batch, self.rows = batch, len(batch["input_ids"])
        self.length = self.rows * steps

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        return {key: value[index % self.rows] for key, value in self.batch.items()}


class StepTimer(TrainerCallback):
    """Seconds of each optimizer step (forward, backward, clipping, AdamW), the device synchronised
    at both ends."""

    def __init__(self, device: str):
        self.device, self.seconds, self.start = device, [], None

    def on_step_begin(self, args, state, control, **kwargs):
        synchronize(self.device)
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        synchronize(self.device)
        self.seconds.append(time.perf_counter() - self.start)


def trainer_arguments(settings: GpuBenchmarkSettings, batch: int, compiled: bool, output_dir: str):
    """The Trainer settings every row shares: bf16, fused AdamW, one batch of `batch` sentence pairs
    a step, nothing logged or saved; compiled rows with the Trainer's `torch_compile` (inductor;
    "eager" in a dry run)."""
    return Seq2SeqTrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=batch,
        max_steps=settings.warmup_steps + settings.timed_steps,
        bf16=True,
        optim="adamw_torch_fused",
        learning_rate=5e-4,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        torch_compile=compiled,
        torch_compile_backend=("eager" if settings.dry_run else "inductor") if compiled else None,
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_drop_last=True,
        remove_unused_columns=False,
        seed=0,
        use_cpu=settings.device == "cpu",
    )


class HandTrainer:
    """The Trainer's step with `trainer_arguments`' settings, written out, for machines without
    accelerate (which the Trainer needs): bf16 autocast, fused AdamW (lr 5e-4, constant), gradients
    clipped at 1.0."""

    def __init__(self, model: nn.Module, settings: GpuBenchmarkSettings, compiled: bool):
        self.model, self.settings = model, settings
        backend = "eager" if settings.dry_run else "inductor"
        self.forward = torch.compile(model, backend=backend) if compiled else model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, fused=True)

    def train(self, batch: dict, timer: StepTimer):
        self.model.train()
        for _ in range(self.settings.warmup_steps + self.settings.timed_steps):
            timer.on_step_begin(None, None, None)
            with torch.autocast(self.settings.device, dtype=torch.bfloat16):
                loss = self.forward(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            timer.on_step_end(None, None, None)


def model_for(member: str, settings: GpuBenchmarkSettings, **overrides) -> nn.Module:
    """`member` at `settings.size` (tiny in a dry run) with `overrides` (layers), random weights, on
    the device."""
    torch.manual_seed(0)
    shape = {**TINY, **overrides} if settings.dry_run else overrides
    return build_model(member, settings.size, settings.vocab_size, **shape).to(settings.device)


def training_row(member: str, settings: GpuBenchmarkSettings, compiled: bool, peaks: dict) -> dict:
    """One member's bf16 training: step seconds (median of the timed steps), first step (compile
    included), source + target tokens/s, and MFU of the measured and of the nominal peak."""
    model = model_for(member, settings)
    batch_size = max(1, settings.target_tokens // settings.length)
    batch = random_batch(batch_size, settings.length, settings.length, settings.vocab_size)
    timer = StepTimer(settings.device)
    started = time.perf_counter()
    if is_accelerate_available():
        with tempfile.TemporaryDirectory() as directory:
            trainer = Seq2SeqTrainer(
                model=model,
                args=trainer_arguments(settings, batch_size, compiled, directory),
                train_dataset=RepeatedRows(batch, settings.warmup_steps + settings.timed_steps),
                data_collator=default_data_collator,
                callbacks=[timer],
            )
            trainer.train()
    else:
        HandTrainer(model, settings, compiled).train(
            {key: value.to(settings.device) for key, value in batch.items()}, timer
        )
    step = statistics.median(timer.seconds[settings.warmup_steps :])
    flops = training_flops(model, batch_size, settings.length, settings.length)
    row = {
        "batch": batch_size,
        "tokens_per_step": 2 * batch_size * settings.length,
        "step_s": step,
        "first_step_s": timer.seconds[0],
        "row_s": time.perf_counter() - started,
        "tokens_per_s": 2 * batch_size * settings.length / step,
        "flops_per_step": flops,
        "mfu_measured_peak": flops / step / peaks["measured"],
    }
    row["mfu_nominal_peak"] = flops / step / peaks["nominal"] if peaks["nominal"] else None
    del model
    return row


def decoding_rows(settings: GpuBenchmarkSettings) -> dict:
    """{model: {"beam4": sentences/s, "greedy": sentences/s, "precision": ...}} for the base models
    and the Table 6 pair, each prepared by `prepare_for_inference(precision="auto")`, timed
    interleaved (medians)."""
    pair = TINY_PAIR if settings.dry_run else DEPTH_PAIR
    size = "tiny" if settings.dry_run else settings.size
    models = {
        f"{member} {size}": model_for(member, settings)
        for member in ("dwlstm", "residual-prenorm", MARIAN)
    }
    models.update(
        {
            f"{member} {layers['encoder_layers']}+{layers['decoder_layers']}": model_for(
                member, settings, **layers
            )
            for member, layers in pair.items()
        }
    )
    models = {
        name: prepare_for_inference(model, precision="auto") for name, model in models.items()
    }
    source = random_batch(
        settings.generation_batch, settings.source_length, 1, settings.vocab_size, seed=1
    )
    source = {key: value.to(settings.device) for key, value in source.items()}
    tasks = {
        (name, search): (
            lambda m=model, b=beams: generate_forced(
                m, source, b, settings.new_tokens, settings.device
            )
        )
        for name, model in models.items()
        for search, beams in (("beam4", 4), ("greedy", 1))
    }
    for task in tasks.values():  # warm-up
        task()
    seconds = {
        key: statistics.median(values)
        for key, values in interleaved_times(
            tasks, settings.decode_repeats, settings.device
        ).items()
    }
    return {
        name: {
            "precision": model.inference_precision,
            **{
                search: settings.generation_batch / seconds[name, search]
                for search in ("beam4", "greedy")
            },
        }
        for name, model in models.items()
    }


def depth_pair_ratios(decoding: dict, settings: GpuBenchmarkSettings) -> dict:
    """Sentences/s of the depth-wise LSTM over the deep residual model (Xu et al. 2024, Table
    6: 1.65x)."""
    pair = TINY_PAIR if settings.dry_run else DEPTH_PAIR
    names = [
        f"{member} {layers['encoder_layers']}+{layers['decoder_layers']}"
        for member, layers in pair.items()
    ]
    return {
        search: decoding[names[0]][search] / decoding[names[1]][search]
        for search in ("beam4", "greedy")
    }


def run_gpu_benchmark(settings: GpuBenchmarkSettings, log=print) -> dict:
    """Every row of the module docstring: {"settings", "machine", "training", "decoding",
    "depth_pair", ...}."""
    settings.check()
    started = time.perf_counter()
    members = list(settings.members or [*registered_members(), MARIAN])
    name = torch.cuda.get_device_name() if settings.device == "cuda" else "CPU (dry run)"
    peaks = {
        "measured": matmul_peak_flops(
            settings.device, torch.bfloat16, 256 if settings.dry_run else None
        ),
        "nominal": next((peak for part, peak in NOMINAL_BF16_PEAKS.items() if part in name), None),
    }
    report = {
        "settings": asdict(settings),
        "machine": {
            "device": name,
            "torch": torch.__version__,
            "bf16_matmul_peak_flops_per_s": peaks["measured"],
            "nominal_bf16_peak_flops_per_s": peaks["nominal"],
        },
        "trainer": "Seq2SeqTrainer"
        if is_accelerate_available()
        else "HandTrainer (the Trainer's step written out: accelerate is not installed)",
        "training": {"eager": {}, "compiled": {}},
        "not_measured": {},
    }
    for member in members:
        log(f"[training, eager] {member}")
        report["training"]["eager"][member] = training_row(member, settings, False, peaks)
    log("[decoding] base models and the Table 6 pair")
    report["decoding"] = decoding_rows(settings)
    report["depth_pair"] = depth_pair_ratios(report["decoding"], settings)
    if settings.compiled:
        order = [member for member in FIRST_COMPILED if member in members]
        order += [member for member in members if member not in order]
        longest = 0.0
        for member in order:
            elapsed = time.perf_counter() - started
            if elapsed + longest > settings.budget_s:
                report["not_measured"][f"{member} compiled"] = (
                    f"time budget: {elapsed:.0f} s spent, a compiled row took up to {longest:.0f}"
                    f" s, budget {settings.budget_s:.0f} s (run again with --members {member})"
                )
                continue
            log(f"[training, compiled] {member}")
            row = training_row(member, settings, True, peaks)
            report["training"]["compiled"][member] = row
            longest = max(longest, row["row_s"])
    report["seconds"] = time.perf_counter() - started
    return report


def format_gpu_report(report: dict) -> str:
    """The report as Markdown tables."""
    machine = report["machine"]
    nominal = machine["nominal_bf16_peak_flops_per_s"]
    lines = [
        f"Device: {machine['device']}, torch {machine['torch']}; bf16 matmul peak measured "
        f"{machine['bf16_matmul_peak_flops_per_s'] / 1e12:.0f} TFLOP/s"
        + (f", nominal {nominal / 1e12:.0f} TFLOP/s" if nominal else ", nominal unknown")
        + f". Training through {report['trainer']}; {report['seconds']:.0f} s in all.",
        "",
        "| model | mode | batch (pairs) | step (ms) | first step (s) | tokens/s | x Marian | MFU "
        "(measured peak) | MFU (nominal) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, rows in report["training"].items():
        marian = rows.get(MARIAN, {}).get("tokens_per_s")
        for member, row in rows.items():
            versus = f"{row['tokens_per_s'] / marian:.2f}x" if marian else "-"
            mfu = f"{row['mfu_nominal_peak']:.1%}" if row["mfu_nominal_peak"] is not None else "-"
            lines.append(
                f"| {member} | {mode} | {row['batch']} | {1000 * row['step_s']:.1f} | "
                f"{row['first_step_s']:.1f} | {row['tokens_per_s']:,.0f} | {versus} | "
                f"{row['mfu_measured_peak']:.1%} | {mfu} |"
            )
    lines += [
        "",
        "| model (decoding) | precision | beam 4 sent/s | greedy sent/s |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {row['precision']} | {row['beam4']:.1f} | {row['greedy']:.1f} |"
        for name, row in report["decoding"].items()
    ]
    pair = report["depth_pair"]
    lines += [
        "",
        f"Table 6 pair, depth-wise LSTM / deep residual: beam 4 {pair['beam4']:.2f}x, greedy "
        f"{pair['greedy']:.2f}x (Xu et al. 2024: 1.65x).",
    ]
    lines += [f"Not measured: {row}: {why}" for row, why in report["not_measured"].items()]
    return "\n".join(lines)


__all__ = ["GpuBenchmarkSettings", "HandTrainer", "format_gpu_report", "run_gpu_benchmark"]
