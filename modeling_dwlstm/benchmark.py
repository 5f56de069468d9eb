"""Speed of every family member against Hugging Face's `MarianMTModel` (issue 5; SPEC §8).

Measured side by side in one process, because the machines are shared and noisy: models are
interleaved within each repetition (rotating the order) and every number is a median.

- training: source + target tokens per second of forward + backward + Adam step, at a fixed token
  budget per batch, for each length of `lengths` (source = target length); peak memory;
- generation: sentences per second of `generate()` with beam 4 and greedy search, on a fixed batch,
  with `min_new_tokens = max_new_tokens` so that every model emits exactly the same number of tokens;
- achieved FLOP/s of the training step (per-side count, `training_flops`) next to the measured
  matmul peak of the machine (`matmul_peak_flops`); on a GPU this ratio is the MFU.

Models are randomly initialised at the papers' sizes (`SIZES`), with one tied vocabulary. On a GPU
everything runs under bf16 autocast; on a CPU in fp32 with `threads` threads.
"""

import json
import os
import re
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForSeq2SeqLM, MarianConfig, MarianMTModel

from . import FAMILY
from .configuration_translation import EOS_ID as EOS
from .configuration_translation import PAD_ID as PAD
from .configuration_translation import UNK_ID
from .files import atomic_write_json
from .modeling_translation import MultiHeadAttention
from .paper_configs import MEMBERS, PAPER_VOCAB_SIZE
from .paper_configs import SIZES as PAPER_SIZES

# The papers' base size (paper_configs.SIZES) at 6+6 layers, and a small one (RESULTS.md's campaign size).
SIZES = {
    "base": dict(d_model=PAPER_SIZES["base"]["d_model"], encoder_layers=6, decoder_layers=6,
                 heads=PAPER_SIZES["base"]["encoder_attention_heads"], ffn_dim=PAPER_SIZES["base"]["ffn_dim"]),
    "small": dict(d_model=256, encoder_layers=3, decoder_layers=3, heads=4, ffn_dim=1024),
}
MARIAN = "marian"
FIRST_WORD = UNK_ID + 1  # random words are drawn from [FIRST_WORD, vocab), after the special ids

# Issue 5 §2, each (name, numerator, denominator, tasks, minimum ratio of throughputs).
TARGETS = [
    ("residual pre-norm vs Marian, generation", "residual-prenorm", MARIAN, ("beam4", "greedy"), 1.2),
    ("residual pre-norm vs Marian, training", "residual-prenorm", MARIAN, ("train",), 1.1),
    ("depth-wise LSTM vs residual pre-norm, generation", "dwlstm", "residual-prenorm", ("beam4", "greedy"), 0.95),
    ("depth-wise LSTM vs residual pre-norm, training", "dwlstm", "residual-prenorm", ("train",), 0.9),
]


@dataclass
class BenchmarkSettings:
    sizes: tuple = ("small", "base")
    lengths: tuple = (16, 64, 256)  # training length sweep (source = target length)
    headline_length: int = 64  # the training length the targets are checked at
    token_budget: int = 4096  # source + target tokens per training batch
    generation_batch: int = 32  # source sentences per generate() call
    source_length: int = 20
    new_tokens: int = 24  # forced: min_new_tokens = max_new_tokens
    repeats: int = 3
    threads: int = 2  # CPU only
    vocab_size: int = PAPER_VOCAB_SIZE
    members: tuple | None = None  # None: every registered member, plus Marian
    measure_memory: bool = True
    peak_matmul_size: int | None = None  # side of the square matmul timed for the peak; None: 2048 (CPU), 8192 (GPU)
    compile: bool = False  # torch.compile the family's models (Marian stays eager)
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")

    def check(self):
        unknown = [s for s in self.sizes if s not in SIZES]
        if unknown:
            raise ValueError(f"Unknown sizes {unknown}; choose from {sorted(SIZES)}.")
        if self.headline_length not in self.lengths:
            raise ValueError(f"headline_length {self.headline_length} must be one of lengths {self.lengths}.")
        if any(2 * length > self.token_budget for length in self.lengths):
            raise ValueError(f"token_budget {self.token_budget} is too small for one sentence pair of length {max(self.lengths)}.")
        if self.repeats < 1 or self.threads < 1 or self.new_tokens < 1 or self.generation_batch < 1:
            raise ValueError("repeats, threads, new_tokens and generation_batch must be >= 1.")
        known = registered_members()
        if self.members is not None and set(self.members) - set(known) - {MARIAN}:
            raise ValueError(f"Unknown members {sorted(set(self.members) - set(known) - {MARIAN})}; registered: {sorted(known)}.")


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def registered_members() -> dict:
    """name -> (config class, fields) for every member `paper_configs.MEMBERS` names, plus any member in
    `FAMILY` it does not cover (by its default options), so newly registered members are benchmarked too."""
    members = dict(MEMBERS)
    covered = {config_class for config_class, _ in members.values()}
    for config_class, _, _ in FAMILY:
        if config_class not in covered:
            members[config_class.model_type] = (config_class, {})
    return members


def build_model(member: str, size: str, vocab_size: int = PAPER_VOCAB_SIZE, **overrides) -> nn.Module:
    """A randomly initialised translation model of `member` (or "marian") at `SIZES[size]`, tied embeddings."""
    shape = dict(SIZES[size])
    heads = shape.pop("heads")
    common = dict(vocab_size=vocab_size, dropout=0.1, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD)
    if member == MARIAN:
        config = MarianConfig(
            d_model=shape["d_model"], encoder_layers=shape["encoder_layers"], decoder_layers=shape["decoder_layers"],
            encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=shape["ffn_dim"],
            decoder_ffn_dim=shape["ffn_dim"], activation_function="relu", scale_embedding=True,
            forced_eos_token_id=None, bos_token_id=0, max_position_embeddings=1024,
            share_encoder_decoder_embeddings=True, tie_word_embeddings=True, **common, **overrides,
        )
        return MarianMTModel(config)
    config_class, member_fields = registered_members()[member]
    config = config_class(
        **shape, encoder_attention_heads=heads, decoder_attention_heads=heads, **common, **member_fields, **overrides
    )
    return AutoModelForSeq2SeqLM.from_config(config)


def random_batch(batch: int, source_length: int, target_length: int, vocab_size: int, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return dict(
        input_ids=torch.randint(FIRST_WORD, vocab_size, (batch, source_length), generator=generator),
        attention_mask=torch.ones(batch, source_length, dtype=torch.long),
        labels=torch.randint(FIRST_WORD, vocab_size, (batch, target_length), generator=generator),
    )


def batch_size_for(length: int, token_budget: int) -> int:
    return max(1, token_budget // (2 * length))


# ---------------------------------------------------------------------------------------------
# FLOPs (SPEC §8)
# ---------------------------------------------------------------------------------------------


def reachable_modules(module: nn.Module, prefix: str = ""):
    """(path, module) for `module` and everything below it, including shared modules that a layer uses
    but does not own (attached by reference, see `attach_shared`, or named by `used_modules()`): a shared
    module counts once per use."""
    yield prefix, module
    children = dict(module._modules)
    children.update({name: value for name, value in vars(module).items() if isinstance(value, nn.Module)})
    children.update(module.used_modules() if hasattr(module, "used_modules") else {})
    for name, child in children.items():
        if child is not None:
            yield from reachable_modules(child, f"{prefix}.{name}" if prefix else name)


def is_attention(module: nn.Module) -> bool:
    return isinstance(module, MultiHeadAttention) or type(module).__name__.endswith("Attention")  # Marian's too


def is_cross_attention(path: str, module: nn.Module) -> bool:
    if isinstance(module, MultiHeadAttention):
        return module.is_cross_attention
    return path.rsplit(".", 1)[-1] == "encoder_attn"  # Marian / BART naming


def layer_costs(layer: nn.Module) -> dict:
    """Matmul weights and attention modules of one layer. Every 2-D `weight` outside embeddings is a
    matmul over the layer's own positions, except cross-attention keys/values: projections of the
    encoder output, so they run over source positions."""
    costs = dict(own_weights=0, source_weights=0, self_attentions=0, cross_attentions=0)
    cross_attention_paths = set()
    for path, module in reachable_modules(layer):
        if is_attention(module):
            cross = is_cross_attention(path, module)
            costs["cross_attentions" if cross else "self_attentions"] += 1
            if cross:
                cross_attention_paths.add(path)
        weight = module._parameters.get("weight")
        if weight is None or weight.dim() != 2 or isinstance(module, nn.Embedding):
            continue
        parent, _, leaf = path.rpartition(".")
        on_source = parent in cross_attention_paths and leaf in ("k_proj", "v_proj", "kv_proj")
        costs["source_weights" if on_source else "own_weights"] += weight.numel()
    return costs


def stack_costs(layers) -> dict:
    totals = dict(own_weights=0, source_weights=0, self_attentions=0, cross_attentions=0)
    for layer in layers:
        for key, value in layer_costs(layer).items():
            totals[key] += value
    return totals


def training_flops(model: nn.Module, batch: int, source_length: int, target_length: int) -> int:
    """FLOPs of one training step (forward + backward), counted per side (SPEC §8):
    6 x (encoder matmul weights x source tokens + (decoder weights + output projection) x target tokens),
    cross-attention keys/values over source tokens, plus attention's score and value products,
    4 x Tq x Tk x d forward per attention module, tripled for the backward pass.
    Matches `torch.utils.flop_counter.FlopCounterMode` under the math SDPA backend (tested)."""
    encoder = stack_costs(model.get_encoder().layers)
    decoder = stack_costs(model.get_decoder().layers)
    output_projection = model.get_output_embeddings().weight.numel()
    S, T = source_length, target_length
    linear = 6 * ((encoder["own_weights"] + decoder["source_weights"]) * S + (decoder["own_weights"] + output_projection) * T)
    score_and_value_products = encoder["self_attentions"] * S * S + decoder["self_attentions"] * T * T + decoder["cross_attentions"] * T * S
    return batch * (linear + 3 * 4 * model.config.d_model * score_and_value_products)


def decode_matmul_weights(model: nn.Module) -> int:
    """Matmul weights one generated token goes through (decoder layers and output projection; the
    cross-attention keys/values are computed once): what a decode step costs when matmuls dominate."""
    return stack_costs(model.get_decoder().layers)["own_weights"] + model.get_output_embeddings().weight.numel()


def matmul_peak_flops(device: str, dtype: torch.dtype, size: int | None = None, repeats: int = 5) -> float:
    """The best FLOP/s of a square matmul: the practical limit of the training step."""
    size = size or (8192 if device == "cuda" else 2048)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    times = [timed(lambda: a @ b, device) for _ in range(repeats + 1)][1:]
    return 2 * size**3 / min(times)


# ---------------------------------------------------------------------------------------------
# Timed tasks
# ---------------------------------------------------------------------------------------------


def synchronize(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(task, device: str) -> float:
    synchronize(device)
    start = time.perf_counter()
    task()
    synchronize(device)
    return time.perf_counter() - start


def autocast(device: str):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else nullcontext()


def training_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: dict, device: str):
    """One forward + backward + optimizer step."""
    model.train()
    with autocast(device):
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def generate_forced(model: nn.Module, batch: dict, num_beams: int, new_tokens: int, device: str) -> torch.Tensor:
    """generate() that emits exactly `new_tokens` tokens per sentence (EOS is suppressed until then)."""
    model.eval()
    with torch.inference_mode(), autocast(device):
        return model.generate(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=num_beams,
            do_sample=False, min_new_tokens=new_tokens, max_new_tokens=new_tokens,
        )


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)


def compiled(model: nn.Module, backend: str = "inductor") -> nn.Module:
    """`torch.compile` the forward pass (generate() and training both go through it); weights stay shared.
    Dynamic shapes: the decoder's cache grows by one position per generated token."""
    model.forward = torch.compile(model.forward, dynamic=True, backend=backend)
    return model


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------


def resident_kib(field_name: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field_name}:\s+(\d+) kB", status, re.M).group(1))


def training_peak_memory(member: str, size: str, length: int, settings: BenchmarkSettings) -> int:
    """Peak bytes of training (weights, gradients, Adam state, activations) over two steps.
    GPU: the allocator's peak. CPU: run in a fresh process and read its peak resident set size
    (VmHWM, reset just before the model is built), since the CPU allocator keeps no statistics."""
    if settings.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        run_training_steps(member, size, length, settings)
        return torch.cuda.max_memory_allocated() - before
    code = (  # the child gets the size's shape too, so sizes added at run time (tests) work
        "import json, sys; from modeling_dwlstm.benchmark import SIZES, BenchmarkSettings, cpu_training_peak_memory; "
        "SIZES[sys.argv[3]] = json.loads(sys.argv[5]); s = BenchmarkSettings(**json.loads(sys.argv[1])); "
        "print(cpu_training_peak_memory(sys.argv[2], sys.argv[3], int(sys.argv[4]), s))"
    )
    package_root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    options = json.dumps({k: v for k, v in asdict(settings).items() if k not in ("members",)})
    result = subprocess.run([sys.executable, "-c", code, options, member, size, str(length), json.dumps(SIZES[size])], env=env,
                            capture_output=True, text=True, check=False)
    if result.returncode:
        raise RuntimeError(f"Memory probe for {member} {size} failed:\n{result.stderr[-2000:]}")
    return int(result.stdout.strip().splitlines()[-1])


def cpu_training_peak_memory(member: str, size: str, length: int, settings: BenchmarkSettings) -> int:
    torch.set_num_threads(settings.threads)
    before = resident_kib("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size
    except OSError:
        pass
    run_training_steps(member, size, length, settings)
    return 1024 * (resident_kib("VmHWM") - before)


def run_training_steps(member: str, size: str, length: int, settings: BenchmarkSettings, steps: int = 2):
    torch.manual_seed(0)
    model = build_model(member, size, settings.vocab_size).to(settings.device)
    optimizer = make_optimizer(model)
    batch = to_device(random_batch(batch_size_for(length, settings.token_budget), length, length, settings.vocab_size), settings.device)
    for _ in range(steps):
        training_step(model, optimizer, batch, settings.device)


def to_device(batch: dict, device: str) -> dict:
    return {key: value.to(device) for key, value in batch.items()}


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def interleaved_medians(tasks: dict, repeats: int, device: str) -> dict:
    """{key: seconds}: every task once per repetition, the order rotated each time, median over repetitions."""
    keys = list(tasks)
    times = {key: [] for key in keys}
    for repeat in range(repeats):
        shift = repeat % len(keys)
        for key in keys[shift:] + keys[:shift]:
            times[key].append(timed(tasks[key], device))
    return {key: statistics.median(values) for key, values in times.items()}


def benchmark_size(size: str, settings: BenchmarkSettings, log=print) -> dict:
    """All measurements of one model size: {member: {...}}."""
    device = settings.device
    members = list(settings.members or [*registered_members(), MARIAN])
    models, optimizers = {}, {}
    for member in members:
        torch.manual_seed(0)
        model = build_model(member, size, settings.vocab_size).to(device)
        models[member] = compiled(model) if settings.compile and member != MARIAN else model
        optimizers[member] = make_optimizer(model)
    source = to_device(random_batch(settings.generation_batch, settings.source_length, 1, settings.vocab_size, seed=1), device)
    training_batches = {
        length: to_device(random_batch(batch_size_for(length, settings.token_budget), length, length, settings.vocab_size), device)
        for length in settings.lengths
    }
    tasks = {}
    for member in members:
        model, optimizer = models[member], optimizers[member]
        for length, batch in training_batches.items():
            tasks[member, f"train{length}"] = lambda m=model, o=optimizer, b=batch: training_step(m, o, b, device)
        tasks[member, "beam4"] = lambda m=model: generate_forced(m, source, 4, settings.new_tokens, device)
        tasks[member, "greedy"] = lambda m=model: generate_forced(m, source, 1, settings.new_tokens, device)
    log(f"[{size}] warm-up of {len(members)} models ...")
    for task in tasks.values():
        task()
    log(f"[{size}] timing {len(tasks)} tasks x {settings.repeats} repeats, interleaved ...")
    seconds = interleaved_medians(tasks, settings.repeats, device)
    results = {}
    for member in members:
        row = {
            "parameters": sum(p.numel() for p in models[member].parameters()),
            "decode_matmul_weights_per_token": decode_matmul_weights(models[member]),
            "beam4_sentences_per_s": settings.generation_batch / seconds[member, "beam4"],
            "greedy_sentences_per_s": settings.generation_batch / seconds[member, "greedy"],
            "train": {},
        }
        for length, batch in training_batches.items():
            step = seconds[member, f"train{length}"]
            batch_size = batch["input_ids"].shape[0]
            flops = training_flops(models[member], batch_size, length, length)
            row["train"][length] = {
                "batch": batch_size, "tokens_per_s": 2 * batch_size * length / step, "step_s": step,
                "flops_per_step": flops, "flops_per_s": flops / step,
            }
        results[member] = row
    del models, optimizers, tasks
    if settings.measure_memory:
        for member in members:
            log(f"[{size}] peak training memory of {member} ...")
            results[member]["train_peak_memory_bytes"] = training_peak_memory(member, size, settings.headline_length, settings)
    return results


def run_benchmark(settings: BenchmarkSettings, log=print) -> dict:
    settings.check()
    if settings.device == "cpu":
        torch.set_num_threads(settings.threads)
    dtype = torch.bfloat16 if settings.device == "cuda" else torch.float32
    report = {
        "settings": asdict(settings),
        "machine": {
            "device": torch.cuda.get_device_name() if settings.device == "cuda" else f"CPU, {torch.get_num_threads()} threads",
            "dtype": str(dtype).removeprefix("torch."),
            "torch": torch.__version__,
            "matmul_peak_flops_per_s": matmul_peak_flops(settings.device, dtype, settings.peak_matmul_size),
        },
        "sizes": {},
    }
    for size in settings.sizes:
        report["sizes"][size] = benchmark_size(size, settings, log)
    report["targets"] = check_targets(report, settings)
    return report


def throughput(row: dict, task: str, headline_length: int) -> float:
    return row["train"][headline_length]["tokens_per_s"] if task == "train" else row[f"{task}_sentences_per_s"]


def check_targets(report: dict, settings: BenchmarkSettings) -> list[dict]:
    """Issue 5 §2 at the largest measured size: each ratio of throughputs, and whether it is met."""
    size = "base" if "base" in report["sizes"] else settings.sizes[-1]
    rows = report["sizes"][size]
    checks = []
    targets = list(TARGETS) + [
        (f"{member} vs Marian, generation", member, MARIAN, ("beam4", "greedy"), 1.0) for member in rows if member != MARIAN
    ]
    for name, numerator, denominator, tasks, minimum in targets:
        if numerator not in rows or denominator not in rows:
            continue
        for task in tasks:
            length = settings.headline_length
            ratio = throughput(rows[numerator], task, length) / throughput(rows[denominator], task, length)
            checks.append(dict(target=f"{name} ({task})", size=size, ratio=ratio, minimum=minimum, met=ratio >= minimum))
    return checks


def format_report(report: dict) -> str:
    """Markdown tables: one per size, then the targets."""
    settings, machine = report["settings"], report["machine"]
    peak = machine["matmul_peak_flops_per_s"]
    headline = settings["headline_length"]
    lines = [
        f"Device: {machine['device']}, {machine['dtype']}, torch {machine['torch']}; measured matmul peak "
        f"{peak / 1e9:.0f} GFLOP/s. Generation: {settings['generation_batch']} sources of {settings['source_length']} "
        f"tokens, {settings['new_tokens']} new tokens forced. Training: {settings['token_budget']} source+target "
        f"tokens per batch, Adam; medians of {settings['repeats']} interleaved repeats.",
    ]
    for size, rows in report["sizes"].items():
        lengths = list(next(iter(rows.values()))["train"])
        lines += ["", f"**{size}**", ""]
        header = ["model", "params (M)", "decode matmul weights/token (M)", "beam-4 sent/s", "greedy sent/s"]
        header += [f"train tok/s @{length}" for length in lengths]
        header += [f"GFLOP/s @{headline} (of peak)", "train peak mem (MiB)"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for member, row in rows.items():
            train = row["train"]
            achieved = train[headline]["flops_per_s"] if headline in train else train[lengths[0]]["flops_per_s"]
            memory = row.get("train_peak_memory_bytes")
            cells = [member, f"{row['parameters'] / 1e6:.2f}", f"{row['decode_matmul_weights_per_token'] / 1e6:.1f}",
                     f"{row['beam4_sentences_per_s']:.1f}", f"{row['greedy_sentences_per_s']:.1f}"]
            cells += [f"{train[length]['tokens_per_s']:,.0f}" for length in lengths]
            cells += [f"{achieved / 1e9:.0f} ({achieved / peak:.0%})", f"{memory / 2**20:,.0f}" if memory else "-"]
            lines.append("| " + " | ".join(cells) + " |")
    if report.get("targets"):
        lines += ["", "| target | ratio | needed | |", "|---|---|---|---|"]
        for check in report["targets"]:
            lines.append(f"| {check['target']} [{check['size']}] | {check['ratio']:.2f}x | >= {check['minimum']}x | "
                         f"{'met' if check['met'] else 'MISSED'} |")
    return "\n".join(lines)


def write_report(report: dict, path: str | Path):
    """Write the report as JSON, atomically (a temp file, then rename)."""
    atomic_write_json(path, report)


__all__ = [
    "SIZES", "TARGETS", "BenchmarkSettings", "registered_members", "build_model", "training_flops", "decode_matmul_weights",
    "matmul_peak_flops",
    "training_step", "generate_forced", "run_benchmark", "check_targets", "format_report", "write_report",
]
