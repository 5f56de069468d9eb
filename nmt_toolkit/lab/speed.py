"""Speed of every family member against Hugging Face's `MarianMTModel` and CTranslate2 (the method:
docs/speed.md): the library behind `dwlstm-measure-speed`.

Measured side by side in one process, because the machines are shared and noisy: the models are
interleaved within each repetition, the order rotated (`interleaved_times`), every number a median.

- training: source + target tokens per second of forward, backward and Adam step at a fixed token
  budget per batch, for each of `lengths`; peak memory; achieved FLOP/s (`training_flops`) beside
  the measured matmul peak (`matmul_peak_flops`; on a GPU the ratio is the MFU);
- generation: sentences per second of beam 4 and greedy `generate()`, the end-of-sentence token
  forbidden until `max_new_tokens` so that every model emits the same tokens (`generate_forced`).

Models have random weights at the papers' sizes (`SIZES`). On a GPU everything runs under bf16
autocast; on a CPU in float32, and a deployment run adds every precision of `prepare_for_inference`
(`PRECISIONS`), bf16 training (`train_bf16`, bounded by `step_matmul_rates`), CTranslate2 in a child
process (`EngineProcess`), Xu et al. 2024's Table 6 pair (`depth_pair`), the vocabulary shortlist on
both sides (`shortlist`), and the int8 GEMMs' share of decoding (`gemm_share`). Paths this CPU
refuses to users (`refused_paths`) are listed with the reason and timed only with `measure_refused`;
`TARGETS` are the deployment run's speed targets, checked at the largest measured size.
"""

import copy
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer, models
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function
from transformers import (
    AutoModelForSeq2SeqLM,
    LogitsProcessor,
    LogitsProcessorList,
    MarianConfig,
    MarianMTModel,
    PreTrainedTokenizerFast,
)

from modeling_dwlstm import FAMILY
from modeling_dwlstm.building_blocks import MultiHeadAttention
from modeling_dwlstm.configuration_translation import BOS_ID as BOS
from modeling_dwlstm.configuration_translation import EOS_ID as EOS
from modeling_dwlstm.configuration_translation import PAD_ID as PAD
from modeling_dwlstm.configuration_translation import UNK_ID
from modeling_dwlstm.generation_translation import Shortlist
from modeling_dwlstm.paper_configs import MEMBER_PRESETS, PAPER_VOCAB_SIZE
from modeling_dwlstm.paper_configs import SIZES as PAPER_SIZES
from modeling_dwlstm.precision import PRECISIONS as INFERENCE_PRECISIONS
from modeling_dwlstm.precision import (
    cpu_features,
    cpuinfo,
    int8_route,
    packs_bfloat16_weights,
    prepare_for_inference,
    quantize_int8,
)

from ..allocator import freed_memory_kept, keep_freed_memory
from ..ctranslate2_export import convert_loaded
from ..files import atomic_write_json

# The papers' base size (paper_configs.SIZES) at 6+6 layers, and a small one (RESULTS.md's
# campaign size).
SIZES = {
    "base": dict(
        d_model=PAPER_SIZES["base"]["d_model"],
        encoder_layers=6,
        decoder_layers=6,
        heads=PAPER_SIZES["base"]["encoder_attention_heads"],
        ffn_dim=PAPER_SIZES["base"]["ffn_dim"],
    ),
    "small": dict(d_model=256, encoder_layers=3, decoder_layers=3, heads=4, ffn_dim=1024),
}
MARIAN = "marian"
# random words are drawn from [FIRST_WORD, vocab - 1): after the special ids, before Marian's pad
FIRST_WORD = UNK_ID + 1
# Generation precisions: name -> precision.prepare_for_inference(dtype, quantize),
# precision.PRECISIONS.
PRECISIONS = INFERENCE_PRECISIONS
# CTranslate2 compute types (it refuses bfloat16 on a CPU without AMX)
ENGINE_PRECISIONS = ("float32", "int8")
# what CTranslate2 can run: Marian, and our export of the baselines
ENGINE_MEMBERS = (MARIAN, "residual-prenorm")
# Xu et al. 2024, Table 6: the 12-layer depth-wise LSTM decodes as well as, and 1.65x faster than,
# the 24-layer residual model.
DEPTH_PAIR = {
    "dwlstm": dict(encoder_layers=12, decoder_layers=12),
    "residual-prenorm": dict(encoder_layers=24, decoder_layers=24),
}

# The deployment run's targets, each (name, kind, options); `check_targets` reads them, one function
# per kind (`TARGET_CHECKS`). A minimum of None is a row reported beside the targets, not a target.
TARGETS = [
    (
        "int8 decoding (the CPU's int8 route) vs float32",
        "precision_vs_float32",
        dict(members=("dwlstm", "residual-prenorm"), precision="int8", minimum=1.3),
    ),
    (
        "bfloat16 decoding vs float32",
        "precision_vs_float32",
        dict(members=("dwlstm", "residual-prenorm"), precision="bfloat16", minimum=1.0),
    ),
    (
        "depth-wise LSTM, fastest CPU path vs CTranslate2 int8 Marian",
        "path_vs_engine",
        dict(
            member="dwlstm",
            precision=None,
            minimums={
                "AVX2": {"beam4": 0.85},
                "AVX-512 VNNI / AMX": {"beam4": 1.5, "greedy": 1.5},
            },
        ),
    ),
    (
        "residual pre-norm, generate() int8 vs CTranslate2 int8 Marian",
        "path_vs_engine",
        dict(member="residual-prenorm", precision="int8", minimums={"beam4": 1.0}),
    ),
    (
        "residual pre-norm, our CTranslate2 export int8 vs CTranslate2 int8 Marian",
        "export_vs_engine",
        dict(member="residual-prenorm", minimums={"beam4": None, "greedy": None}),
    ),
    (
        "depth-wise LSTM with a shortlist vs CTranslate2 int8 Marian with the same table",
        "shortlist_vs_engine",
        dict(member="dwlstm", minimums={"beam4": 1.0, "greedy": 1.0}),
    ),
    (
        "depth-wise LSTM int8 beam-4 decoding, share of the time in int8 matrix products",
        "gemm_share",
        dict(member="dwlstm", minimum=0.6),
    ),
    (
        "bf16 vs fp32 training step speed-up",
        "bf16_training",
        dict(share_of_matmul_ratio=0.9, minimum=4.0),
    ),
    (
        "12+12 depth-wise LSTM vs 24+24 residual pre-norm, decoding",
        "depth_pair",
        dict(minimums={"beam4": 1.65}),
    ),
    (
        "residual pre-norm fp32 training step, share of the matmul peak",
        "matmul_share",
        dict(member="residual-prenorm", minimum=0.75),
    ),
]
# The int8 product of each route of `precision.quantize_int8`, as torch.profiler names it.
INT8_GEMM_OPS = {
    "fbgemm": "quantized::linear_with_input_q_dq_qweight_dq_output_fp32",
    "int_mm": "aten::_int_mm",
}
PROFILED_MEMBER = "dwlstm"  # whose int8 beam-4 decoding `int8_gemm_share` profiles
SEARCHES = ("beam4", "greedy")
# The synthetic shortlist: random targets per source token plus the most frequent words (here: the
# first ids).
SHORTLIST_TOP_K = 6
SHORTLIST_FREQUENT = 100
SHORTLIST = "shortlist"  # the suffix of the engine rows decoded with it
# else "{precision} decoding"
PATH_NAMES = {"train_bf16": "bf16 training", "int8_gemm_share": "the int8 GEMM profile"}


@dataclass
class BenchmarkSettings:
    sizes: tuple = ("small", "base")
    lengths: tuple = (16, 64, 256)  # training length sweep (source = target length)
    headline_length: int = 64  # the training length the targets are checked at
    token_budget: int = 4096  # source + target tokens per training batch
    generation_batch: int = 32  # source sentences per generate() call
    source_length: int = 20
    new_tokens: int = 24  # forced: EOS forbidden, generation stops at max_new_tokens
    repeats: int = 3
    threads: int = 2  # CPU only
    vocab_size: int = PAPER_VOCAB_SIZE
    members: tuple | None = None  # None: every registered member, plus Marian
    measure_memory: bool = True
    # side of the square matmul timed for the peak; None: 2048 (CPU), 8192 (GPU)
    peak_matmul_size: int | None = None
    compile: bool = False  # torch.compile the family's models (Marian stays eager)
    # the family's generate() with compile_decoding=True; the first decodes, which
    compile_decoding: bool = False
    # compile, are the warm-up (reported as `first_decode_s`)
    precisions: tuple = ("float32",)  # generation precisions, keys of PRECISIONS
    train_bf16: bool = False  # also time training under bfloat16 autocast, at headline_length
    # CTranslate2 rows (ENGINE_MEMBERS in ENGINE_PRECISIONS); skipped if not installed
    ctranslate2: bool = False
    # 12+12 depth-wise LSTM vs 24+24 residual pre-norm decoding, at base size
    depth_pair: bool = False
    # also decode with a vocabulary shortlist: our members and CTranslate2 (`use_vmap`)
    shortlist: bool = False
    # profile PROFILED_MEMBER's int8 beam-4 decoding: its share in int8 matrix products
    gemm_share: bool = False
    # also time the paths this CPU refuses to users (`refused_paths`); else only list them
    measure_refused: bool = False
    # glibc keeps freed memory for the whole run (`nmt_toolkit.allocator.keep_freed_memory`)
    keep_freed_memory: bool = False
    # refuse a run that needs more memory than the machine has available (`check_memory`)
    memory_check: bool = True
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")

    def check(self):
        unknown = [s for s in self.sizes if s not in SIZES]
        if unknown:
            raise ValueError(f"Unknown sizes {unknown}; choose from {sorted(SIZES)}.")
        if self.headline_length not in self.lengths:
            raise ValueError(
                f"headline_length {self.headline_length} must be one of lengths {self.lengths}."
            )
        if any(2 * length > self.token_budget for length in self.lengths):
            raise ValueError(
                f"token_budget {self.token_budget} is too small for one sentence pair of length "
                f"{max(self.lengths)}."
            )
        if self.repeats < 1 or self.threads < 1 or self.new_tokens < 1 or self.generation_batch < 1:
            raise ValueError("repeats, threads, new_tokens and generation_batch must be >= 1.")
        known = registered_members()
        if self.members is not None and set(self.members) - set(known) - {MARIAN}:
            raise ValueError(
                f"Unknown members {sorted(set(self.members) - set(known) - {MARIAN})}; "
                f"registered: {sorted(known)}."
            )
        if set(self.precisions) - set(PRECISIONS) or "float32" not in self.precisions:
            raise ValueError(
                f"precisions must include float32 and come from {', '.join(PRECISIONS)}; got "
                f"{self.precisions}."
            )
        if self.device != "cpu" and (
            len(self.precisions) > 1 or self.train_bf16 or self.ctranslate2 or self.gemm_share
        ):
            raise ValueError(
                "precisions, train_bf16, ctranslate2 and gemm_share measure CPU paths: run them "
                "with device='cpu'."
            )


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def registered_members() -> dict:
    """name -> (config class, fields) for every member `paper_configs.MEMBER_PRESETS` names, plus
    any member in `FAMILY` it does not cover (by its default options), so newly registered members
    are benchmarked too."""
    members = dict(MEMBER_PRESETS)
    covered = {config_class for config_class, _ in members.values()}
    for config_class, _, _ in FAMILY:
        if config_class not in covered:
            members[config_class.model_type] = (config_class, {})
    return members


def build_model(
    member: str, size: str, vocab_size: int = PAPER_VOCAB_SIZE, **overrides
) -> nn.Module:
    """A randomly initialised translation model of `member` (or "marian") at `SIZES[size]`, tied
    embeddings."""
    shape = dict(SIZES[size])
    shape.update({key: overrides.pop(key) for key in list(overrides) if key in shape})
    heads = shape.pop("heads")
    common = dict(
        vocab_size=vocab_size,
        dropout=0.1,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
    )
    # Marian's pad (its decoder start) is its last word, where CTranslate2's Marian loader
    # expects it
    if member == MARIAN:
        common.update(pad_token_id=vocab_size - 1, decoder_start_token_id=vocab_size - 1)
        config = MarianConfig(
            d_model=shape["d_model"],
            encoder_layers=shape["encoder_layers"],
            decoder_layers=shape["decoder_layers"],
            encoder_attention_heads=heads,
            decoder_attention_heads=heads,
            encoder_ffn_dim=shape["ffn_dim"],
            decoder_ffn_dim=shape["ffn_dim"],
            activation_function="relu",
            scale_embedding=True,
            forced_eos_token_id=None,
            bos_token_id=0,
            max_position_embeddings=1024,
            share_encoder_decoder_embeddings=True,
            tie_word_embeddings=True,
            **common,
            **overrides,
        )
        return MarianMTModel(config)
    config_class, member_fields = registered_members()[member]
    config = config_class(
        **shape,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        **common,
        **member_fields,
        **overrides,
    )
    return AutoModelForSeq2SeqLM.from_config(config)


def synthetic_shortlist(
    vocab_size: int, top_k: int = SHORTLIST_TOP_K, frequent: int = SHORTLIST_FREQUENT, seed: int = 0
) -> Shortlist:
    """A shortlist for random-weight models: `top_k` random words per source token, the first
    `frequent` words and the special tokens (ours and Marian's padding, the last id) always
    allowed."""
    generator = torch.Generator().manual_seed(seed)
    table = torch.randint(FIRST_WORD, vocab_size - 1, (vocab_size, top_k), generator=generator)
    # fewer in a tiny vocabulary
    frequent_words = range(FIRST_WORD, min(FIRST_WORD + frequent, vocab_size - 1))
    always = torch.tensor([BOS, EOS, PAD, UNK_ID, vocab_size - 1, *frequent_words])
    return Shortlist(
        table, always, {"score": "random (benchmark)", "top_k": top_k, "frequent": frequent}
    )


def random_batch(
    batch: int, source_length: int, target_length: int, vocab_size: int, seed: int = 0
) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return dict(
        input_ids=torch.randint(
            FIRST_WORD, vocab_size - 1, (batch, source_length), generator=generator
        ),
        attention_mask=torch.ones(batch, source_length, dtype=torch.long),
        labels=torch.randint(
            FIRST_WORD, vocab_size - 1, (batch, target_length), generator=generator
        ),
    )


def batch_size_for(length: int, token_budget: int) -> int:
    return max(1, token_budget // (2 * length))


def inference_copy(model: nn.Module, precision: str, allow_refused: bool = False) -> nn.Module:
    """A copy of `model` prepared for generation in `precision` (a key of PRECISIONS) as users get
    it; float32 is `model` itself. `allow_refused`: also where this CPU refuses it to users
    (`refused_routes`), to time how slow it is: bfloat16 through `allow_slow`, int8 through
    torch._int_mm's fallback."""
    if precision == "float32":
        return model
    dtype, quantize = PRECISIONS[precision]
    if quantize == "int8" and allow_refused and "int8" in refused_routes():
        return quantize_int8(
            prepare_for_inference(copy.deepcopy(model), dtype, allow_slow=True), route="int_mm"
        )
    return prepare_for_inference(copy.deepcopy(model), dtype, quantize, allow_slow=allow_refused)


def random_words_tokenizer(vocab_size: int, pad_last: bool = False):
    """A word-level tokenizer over the benchmark's ids: word i is "w{i}", the special tokens at this
    family's ids, or Marian's pad at the last id (`pad_last`). The CTranslate2 converters read the
    vocabulary from it."""
    specials = {
        BOS: "<s>",
        EOS: "</s>",
        UNK_ID: "<unk>",
        vocab_size - 1 if pad_last else PAD: "<pad>",
    }
    vocabulary = {specials.get(i, f"w{i}"): i for i in range(vocab_size)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>")),
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )


def ctranslate2_models(
    models: dict, settings: "BenchmarkSettings", directory: str, log=print
) -> dict:
    """{member: converted model directory} for the ENGINE_MEMBERS among `models`, each converted
    once in float32 into `directory` (every ENGINE_PRECISIONS compute type loads it), with
    `synthetic_shortlist` as its vocabulary map when `settings.shortlist`. {} (with a message) when
    CTranslate2 is not installed."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        log(
            "CTranslate2 rows skipped: ctranslate2 is not installed (pip install "
            "'modeling-dwlstm[ctranslate2]')."
        )
        return {}
    shortlist = synthetic_shortlist(settings.vocab_size) if settings.shortlist else None
    return {
        member: convert_loaded(
            models[member],
            random_words_tokenizer(settings.vocab_size, pad_last=member == MARIAN),
            str(Path(directory) / member),
            shortlist=shortlist,
        )
        for member in ENGINE_MEMBERS
        if member in models
    }


def ctranslate2_translators(paths: dict, threads: int) -> dict:
    """{(member, precision): ctranslate2.Translator} for every converted model in `paths` and
    ENGINE_PRECISIONS."""
    import ctranslate2

    return {
        (member, precision): ctranslate2.Translator(
            path, device="cpu", compute_type=precision, intra_threads=threads, inter_threads=1
        )
        for member, path in paths.items()
        for precision in ENGINE_PRECISIONS
    }


class EngineProcess:
    """CTranslate2's translators in a child process, translating on request; the parent times each
    request.

    Why not in the benchmark's own process: there, after CTranslate2's first translation, PyTorch's
    int8 decoding ran 25-30% slower for the rest of the process (experiments/speed/README.md,
    20:55), which would slow every generate() row interleaved after it. A request is one pipe round
    trip, well under a millisecond against tasks of 0.3-3 s."""

    def __init__(self, paths: dict, threads: int, source_tokens: list[list[str]]):
        # a fresh interpreter: no PyTorch threads forked mid-state
        context = multiprocessing.get_context("spawn")
        self.connection, child = context.Pipe()
        self.process = context.Process(
            target=serve_translations, args=(child, paths, threads, source_tokens), daemon=True
        )
        self.process.start()
        # answered once the translators are loaded (or with the error that stopped them)
        self.request(None)

    def request(self, task: tuple | None):
        """Run `task` = ((member, precision), num_beams, new_tokens[, use_vmap]) in the child (None:
        only answer)."""
        self.connection.send(task)
        error = self.connection.recv()
        if error:
            raise RuntimeError(f"CTranslate2 worker failed: {error}")

    def close(self):
        self.connection.send("stop")
        self.process.join(timeout=60)


def serve_translations(connection, paths: dict, threads: int, source_tokens: list[list[str]]):
    """The child of `EngineProcess`: load the translators, then translate each request until
    "stop"."""
    try:
        translators = ctranslate2_translators(paths, threads)
        while (task := connection.recv()) != "stop":
            if task is not None:
                key, num_beams, new_tokens, *use_vmap = task
                translate_forced(translators[key], source_tokens, num_beams, new_tokens, *use_vmap)
            connection.send(None)
    except EOFError:  # the parent is gone (stopped, killed): no one to report to or translate for
        return
    except Exception as error:  # reported to the parent, which raises it
        connection.send(f"{type(error).__name__}: {error}")


def translate_forced(
    translator,
    source_tokens: list[list[str]],
    num_beams: int,
    new_tokens: int,
    use_vmap: bool = False,
) -> list[list[str]]:
    """CTranslate2's counterpart of `generate_forced`: exactly `new_tokens` target tokens per
    sentence (`use_vmap`: over the model's vocabulary map)."""
    results = translator.translate_batch(
        source_tokens,
        beam_size=num_beams,
        min_decoding_length=new_tokens,
        max_decoding_length=new_tokens,
        use_vmap=use_vmap,
    )
    return [result.hypotheses[0] for result in results]


# ---------------------------------------------------------------------------------------------
# FLOPs (the per-side count of docs/speed.md)
# ---------------------------------------------------------------------------------------------


def reachable_modules(module: nn.Module, prefix: str = ""):
    """(path, module) for `module` and everything below it, including shared modules that a layer
    uses but does not own (attached by reference, see `attach_shared`, or named by
    `used_modules()`): a shared module counts once per use."""
    yield prefix, module
    children = dict(module._modules)
    children.update(
        {name: value for name, value in vars(module).items() if isinstance(value, nn.Module)}
    )
    children.update(module.used_modules() if hasattr(module, "used_modules") else {})
    for name, child in children.items():
        if child is not None:
            yield from reachable_modules(child, f"{prefix}.{name}" if prefix else name)


def is_attention(module: nn.Module) -> bool:
    # Marian's too
    return isinstance(module, MultiHeadAttention) or type(module).__name__.endswith("Attention")


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
    """FLOPs of one training step (forward + backward), counted per side (docs/speed.md): 6 x
    (encoder matmul weights x source tokens + (decoder weights + output projection) x target
    tokens), cross-attention keys/values over source tokens, plus attention's score and value
    products, 4 x Tq x Tk x d forward per attention module, tripled for the backward pass. Matches
    `torch.utils.flop_counter.FlopCounterMode` under the math SDPA backend (tested)."""
    encoder = stack_costs(model.get_encoder().layers)
    decoder = stack_costs(model.get_decoder().layers)
    output_projection = model.get_output_embeddings().weight.numel()
    S, T = source_length, target_length
    linear = 6 * (
        (encoder["own_weights"] + decoder["source_weights"]) * S
        + (decoder["own_weights"] + output_projection) * T
    )
    score_and_value_products = (
        encoder["self_attentions"] * S * S
        + decoder["self_attentions"] * T * T
        + decoder["cross_attentions"] * T * S
    )
    return batch * (linear + 3 * 4 * model.config.d_model * score_and_value_products)


def decode_matmul_weights(model: nn.Module) -> int:
    """Matmul weights one generated token goes through (decoder layers and output projection; the
    cross-attention keys/values are computed once): what a decode step costs when matmuls
    dominate."""
    return (
        stack_costs(model.get_decoder().layers)["own_weights"]
        + model.get_output_embeddings().weight.numel()
    )


def matmul_seconds(
    device: str, dtype: torch.dtype, rows: int, inner: int, columns: int, repeats: int = 5
) -> float:
    """The best time of a (rows x inner) @ (inner x columns) matmul, after one warm-up."""
    a = torch.randn(rows, inner, device=device, dtype=dtype)
    b = torch.randn(inner, columns, device=device, dtype=dtype)
    return min([timed(lambda: a @ b, device) for _ in range(repeats + 1)][1:])


def matmul_peak_flops(
    device: str, dtype: torch.dtype, size: int | None = None, repeats: int = 5
) -> float:
    """The best FLOP/s of a square matmul: the practical limit of the training step."""
    size = size or (8192 if device == "cuda" else 2048)
    return 2 * size**3 / matmul_seconds(device, dtype, size, size, size, repeats)


def step_matmul_shapes(size: str, settings: "BenchmarkSettings") -> list[tuple[int, int, int]]:
    """(rows, inner, columns) of the training step's matmuls at `size` and the headline length: the
    batch's tokens of one side through an attention projection, the feed-forward's two layers and
    the output projection."""
    length = settings.headline_length
    tokens = batch_size_for(length, settings.token_budget) * length
    d_model, ffn_dim = SIZES[size]["d_model"], SIZES[size]["ffn_dim"]
    return [
        (tokens, d_model, d_model),
        (tokens, d_model, ffn_dim),
        (tokens, ffn_dim, d_model),
        (tokens, d_model, settings.vocab_size),
    ]


def step_matmul_rates(size: str, settings: "BenchmarkSettings") -> dict:
    """FLOP/s of the step's matmuls (`step_matmul_shapes`, together) in float32 and in bfloat16, and
    their ratio: what bfloat16 autocast can gain on the matmul share of a training step on this
    machine."""
    shapes = step_matmul_shapes(size, settings)
    flops = sum(2 * rows * inner * columns for rows, inner, columns in shapes)
    rates = {
        name: flops / sum(matmul_seconds(settings.device, dtype, *shape) for shape in shapes)
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))
    }
    return {
        "shapes": shapes,
        "float32_flops_per_s": rates["float32"],
        "bfloat16_flops_per_s": rates["bfloat16"],
        "bfloat16_over_float32": rates["bfloat16"] / rates["float32"],
    }


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


def autocast(device: str, bf16: bool = False):
    """bfloat16 autocast on a GPU always, on a CPU when `bf16` (what the Trainer's --bf16
    does there)."""
    return (
        torch.autocast(device, dtype=torch.bfloat16) if device == "cuda" or bf16 else nullcontext()
    )


def training_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batch: dict, device: str, bf16: bool = False
):
    """One forward + backward + optimizer step."""
    model.train()
    with autocast(device, bf16):
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


class ForbidEndOfSentence(LogitsProcessor):
    """Sets the end-of-sentence score to -inf in place: one column written per step.
    (`min_new_tokens` does the same with `torch.where` passes over all scores, 8-16% of beam-4 time
    at base in experiments/speed/README.md, 15:55: a cost of the forced length, not of decoding.)"""

    def __init__(self, eos_token_id: int):
        self.eos_token_id = eos_token_id

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores[:, self.eos_token_id] = -float("inf")
        return scores


def generate_forced(
    model: nn.Module, batch: dict, num_beams: int, new_tokens: int, device: str, **options
) -> torch.Tensor:
    """generate() that emits exactly `new_tokens` tokens per sentence (EOS is forbidden, so it stops
    at the length); `options` go to generate() (e.g. `lean_decoding=False`, `use_shortlist=True`).
    With a shortlist EOS is forbidden by `suppress_tokens`, which the decoding loop writes in place
    into the shortlist's columns (a processor of its own would send the shortlist to
    transformers' loop)."""
    model.eval()
    eos = model.generation_config.eos_token_id
    forbid = (
        {"suppress_tokens": [eos]}
        if options.get("use_shortlist")
        else {"logits_processor": LogitsProcessorList([ForbidEndOfSentence(eos)])}
    )
    # max_length counts the decoder start too; max_new_tokens beside the generation config's
    # max_length would log a warning at every call.
    with torch.inference_mode(), autocast(device):
        return model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            num_beams=num_beams,
            do_sample=False,
            max_length=1 + new_tokens,
            **forbid,
            **options,
        )


def int8_gemm_share(model: nn.Module, source: dict, new_tokens: int, **options) -> dict:
    """The share of one beam-4 `generate_forced` of the int8 `model` (from
    `precision.quantize_int8`; `options` for generate()) that torch.profiler puts in the int8 matrix
    products of the model's route (`INT8_GEMM_OPS`), after one warm-up call. The profiler's per-op
    overhead counts in the total, so the share is a little low."""
    route = model.int8_route
    generate_forced(model, source, 4, new_tokens, "cpu", **options)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        with record_function("decode"):
            generate_forced(model, source, 4, new_tokens, "cpu", **options)
    events = {event.key: event for event in profiler.key_averages()}
    gemm = events[INT8_GEMM_OPS[route]].cpu_time_total if INT8_GEMM_OPS[route] in events else 0.0
    decode = events["decode"].cpu_time_total
    return {
        "route": route,
        "op": INT8_GEMM_OPS[route],
        "int8_gemm_s": gemm / 1e6,
        "decode_s": decode / 1e6,
        "share": gemm / decode,
    }


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """Adam as the papers set it, fused (one kernel over all parameters): the Trainer's default
    ("adamw_torch_fused"), and 5-6% of a base training step faster than the per-parameter loop on
    this CPU."""
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)


def compiled(model: nn.Module, backend: str = "inductor") -> nn.Module:
    """`torch.compile` the forward pass (generate() and training both go through it); weights stay
    shared. Dynamic shapes: the decoder's cache grows by one position per generated token."""
    model.forward = torch.compile(model.forward, dynamic=True, backend=backend)
    return model


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------


# What compiled decoding steps add per (model, precision), per byte of the float32 model:
# torch.compile's code and objects, not weight copies (the base depth-wise LSTM, 287 MB of float32
# weights: +185-212 MB float32, +52-78 MB bfloat16, +157 MB int8, at most +17 MB bfloat16+int8).
COMPILED_STEP_BYTES = {"float32": 0.75, "bfloat16": 0.3, "int8": 0.55, "bfloat16+int8": 0.1}


class NotEnoughMemory(MemoryError):
    """A run whose rows need more memory than the machine has available (`check_memory`)."""


def weight_bytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


def copy_bytes(model: nn.Module, precision: str) -> int:
    """What `inference_copy(model, precision)` holds, from the float32 `model`: float32 is the
    model itself; bfloat16 halves every weight, and where it packs them (`packs_bfloat16_weights`)
    holds each nn.Linear's weight again in oneDNN's layout once it has decoded; int8
    (`quantize_int8`) stores each nn.Linear's weight in one byte per value (two with fbgemm's packed
    copy) and a float32 scale per row, and the embeddings keep their weights (a tied output
    projection unties)."""
    dtype, quantize = PRECISIONS[precision]
    if precision == "float32":
        return 0
    width = 0.5 if dtype == "bfloat16" else 1.0  # of float32's bytes
    linears = {id(m): m for m in model.modules() if isinstance(m, nn.Linear)}.values()
    if quantize == "none":
        packed = sum(2 * m.weight.numel() for m in linears) if packs_bfloat16_weights() else 0
        return int(width * weight_bytes(model)) + packed
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    quantized = {id(m.weight): m.weight for m in linears if id(m.weight) not in embeddings}
    try:
        int8_bytes = 2 if int8_route() == "fbgemm" else 1
    except ValueError:  # no fast kernel: the benchmark's copy takes torch._int_mm's route
        int8_bytes = 1
    return int(
        width * (weight_bytes(model) - sum(4 * w.numel() for w in quantized.values()))
        + sum(m.weight.numel() * int8_bytes + 4 * m.out_features for m in linears)
    )


def memory_needed(models: dict, settings: BenchmarkSettings, training: bool = True) -> dict:
    """{"decoding": bytes, "training": bytes}: at least what the run holds beside `models` while it
    times their decoding rows (`copy_bytes` in every timed precision, and compiled steps' own
    memory with `compile_decoding`) and while it times their training rows (Adam's two states per
    weight and one model's gradients), activations not counted. `training=False`: decoding only."""
    decoding = sum(
        copy_bytes(model, precision)
        + (
            COMPILED_STEP_BYTES[precision] * weight_bytes(model)
            if decoding_options(member, settings)
            else 0
        )
        for member, model in models.items()
        for precision in timed_precisions(settings)
    )
    needed = {"decoding": int(decoding)}
    if training:
        weights = [weight_bytes(model) for model in models.values()]
        needed["training"] = 2 * sum(weights) + max(weights)
    return needed


def available_memory_bytes() -> int | None:
    """The memory new allocations can get without the kernel's out-of-memory killer stepping in:
    MemAvailable plus free swap (/proc/meminfo); None where there is no /proc/meminfo."""
    try:
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    fields = dict(re.findall(r"^(\w+):\s+(\d+) kB", meminfo, re.M))
    return 1024 * (int(fields["MemAvailable"]) + int(fields.get("SwapFree", 0)))


def check_memory(models: dict, settings: BenchmarkSettings, log=print, training: bool = True):
    """Refuse, before any row runs, a run whose rows need more memory than the machine has left
    (`memory_needed` against `available_memory_bytes`): short of memory the kernel kills the
    process mid-run with nothing but "Killed". Logs the estimate; a CPU check only."""
    if settings.device != "cpu" or not settings.memory_check:
        return
    available = available_memory_bytes()
    if available is None:
        return
    needed = memory_needed(models, settings, training)
    largest = max(needed.values())
    log(
        "Memory beside the models: "
        + ", ".join(f"{rows} rows at least {size / 1e9:.1f} GB" for rows, size in needed.items())
        + f"; {available / 1e9:.1f} GB available."
    )
    if largest > available:
        rows = max(needed, key=needed.get)
        fewer = {
            "decoding": "fewer members (--members) or precisions (--precisions), or without "
            "--compile_decoding",
            "training": "fewer members (--members)",
        }[rows]
        raise NotEnoughMemory(
            f"This run's {rows} rows need at least {largest / 1e9:.1f} GB of memory beside the "
            f"models, and this machine has {available / 1e9:.1f} GB available: the kernel would "
            f"kill it part way. Time {fewer}, or free memory; --skip_memory_check runs it anyway."
        )


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
        "import json, sys; from nmt_toolkit.lab.speed import SIZES, BenchmarkSettings, "
        "cpu_training_peak_memory; SIZES[sys.argv[3]] = json.loads(sys.argv[5]); s = "
        "BenchmarkSettings(**json.loads(sys.argv[1])); "
        "print(cpu_training_peak_memory(sys.argv[2], sys.argv[3], int(sys.argv[4]), s))"
    )
    package_root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
    }
    options = json.dumps({k: v for k, v in asdict(settings).items() if k not in ("members",)})
    result = subprocess.run(
        [sys.executable, "-c", code, options, member, size, str(length), json.dumps(SIZES[size])],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode:
        raise RuntimeError(f"Memory probe for {member} {size} failed:\n{result.stderr[-2000:]}")
    return int(result.stdout.strip().splitlines()[-1])


def cpu_training_peak_memory(
    member: str, size: str, length: int, settings: BenchmarkSettings
) -> int:
    torch.set_num_threads(settings.threads)
    before = resident_kib("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size
    except OSError:
        pass
    run_training_steps(member, size, length, settings)
    return 1024 * (resident_kib("VmHWM") - before)


def run_training_steps(
    member: str, size: str, length: int, settings: BenchmarkSettings, steps: int = 2
):
    torch.manual_seed(0)
    model = build_model(member, size, settings.vocab_size).to(settings.device)
    optimizer = make_optimizer(model)
    batch = to_device(
        random_batch(
            batch_size_for(length, settings.token_budget), length, length, settings.vocab_size
        ),
        settings.device,
    )
    for _ in range(steps):
        training_step(model, optimizer, batch, settings.device)


def to_device(batch: dict, device: str) -> dict:
    return {key: value.to(device) for key, value in batch.items()}


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def interleaved_times(tasks: dict, repeats: int, device: str, log=None) -> dict:
    """{key: [seconds of each repetition]}: every task once per repetition, the order rotated each
    time. `log` (e.g. print) gets each repetition's times as it ends (a long run's progress)."""
    keys = list(tasks)
    times = {key: [] for key in keys}
    for repeat in range(repeats):
        shift = repeat % len(keys)
        for key in keys[shift:] + keys[:shift]:
            times[key].append(timed(tasks[key], device))
        if log is not None:
            log(
                f"# repeat {repeat + 1}: "
                + ", ".join(f"{task_name(key)} {values[-1]:.2f} s" for key, values in times.items())
            )
    return times


def task_name(key) -> str:
    """A task's key as words: ("dwlstm", "beam4") -> "dwlstm beam4"."""
    return " ".join(map(str, key)) if isinstance(key, tuple) else str(key)


def interleaved_medians(tasks: dict, repeats: int, device: str) -> dict:
    """{key: seconds}: `interleaved_times`' median over repetitions."""
    return {
        key: statistics.median(values)
        for key, values in interleaved_times(tasks, repeats, device).items()
    }


def decoding_comparison_inputs(
    precision: str, sentences: int, size: str = "base"
) -> tuple[nn.Module, dict]:
    """What the study's A/B scripts decode (`compare_decoding_variants`): a random depth-wise LSTM
    at `size` (seed 0) prepared for `precision` (`inference_copy`), and `sentences` random sources
    of 20 tokens (`random_batch`)."""
    torch.manual_seed(0)
    model = build_model("dwlstm", size).eval()
    batch = random_batch(sentences, 20, 24, model.config.vocab_size)
    return inference_copy(model, precision), batch


def compare_decoding_variants(
    model: nn.Module,
    batch: dict,
    use,
    variants: tuple[str, str],
    repeats: int,
    beams: tuple[int, ...] = (4, 1),
    new_tokens: int = 24,
    label: str = "",
    log=print,
) -> dict:
    """A change to the decoding timed against what it replaces, in one process (the study's A/B
    scripts): `use(variant)` puts a variant in place, then `generate_forced` decodes `batch` with
    `model`. For each beam count both variants' tokens are compared, then `interleaved_medians`
    over `repeats`, and `log` gets one line: the medians and first / second. Returns {beams:
    {"same": tokens equal, "seconds": {variant: median}, "ratio": first / second}}."""
    first, second = variants

    def decode(variant: str, num_beams: int) -> torch.Tensor:
        use(variant)
        return generate_forced(model, batch, num_beams, new_tokens, "cpu")

    results = {}
    for num_beams in beams:
        same = torch.equal(decode(first, num_beams), decode(second, num_beams))
        tasks = {variant: lambda v=variant, b=num_beams: decode(v, b) for variant in variants}
        seconds = interleaved_medians(tasks, repeats, "cpu")
        ratio = seconds[first] / seconds[second]
        results[num_beams] = {"same": same, "seconds": seconds, "ratio": ratio}
        log(
            f"{label} beams {num_beams} same tokens {same}: {first} {seconds[first]:.3f} s, "
            f"{second} {seconds[second]:.3f} s, {first}/{second} {ratio:.3f}".strip()
        )
    return results


def decoding_options(member: str, settings: BenchmarkSettings) -> dict:
    """generate() options of `member`'s rows: compiled decoding steps for the family with
    `compile_decoding`."""
    return {"compile_decoding": True} if settings.compile_decoding and member != MARIAN else {}


def inference_copies(models: dict, settings: BenchmarkSettings) -> dict:
    """{(member, precision): `inference_copy`} for every model in every precision `settings` times
    (`timed_precisions`): made once, for the rows with and without the shortlist alike (a copy per
    row would hold every model, and its compiled steps, twice)."""
    return {
        (member, precision): inference_copy(model, precision, settings.measure_refused)
        for member, model in models.items()
        for precision in timed_precisions(settings)
    }


def generation_tasks(copies: dict, source: dict, settings: BenchmarkSettings) -> dict:
    """{(member, "beam4" | "greedy", precision): task} for every model of `copies`
    (`inference_copies`)."""
    tasks = {}
    for (member, precision), prepared in copies.items():
        options = decoding_options(member, settings)
        for task, beams in (("beam4", 4), ("greedy", 1)):
            tasks[member, task, precision] = lambda m=prepared, b=beams, o=options: generate_forced(
                m, source, b, settings.new_tokens, settings.device, **o
            )
    return tasks


def shortlist_tasks(copies: dict, source: dict, settings: BenchmarkSettings) -> dict:
    """{(member, "beam4" | "greedy", precision, SHORTLIST): task}: our members' models of `copies`
    (`inference_copies`; not Marian) decoding over `synthetic_shortlist`."""
    tasks = {}
    shortlist = synthetic_shortlist(settings.vocab_size)
    for (member, precision), prepared in copies.items():
        if member == MARIAN:
            continue
        prepared.shortlist = shortlist
        options = decoding_options(member, settings)
        for task, beams in (("beam4", 4), ("greedy", 1)):
            tasks[member, task, precision, SHORTLIST] = lambda m=prepared, b=beams, o=options: (
                generate_forced(
                    m, source, b, settings.new_tokens, settings.device, use_shortlist=True, **o
                )
            )
    return tasks


def generation_rates(
    seconds: dict, members, precisions, settings: BenchmarkSettings, *suffix
) -> dict:
    """{member: {precision: {"beam4": sentences/s, "greedy": sentences/s}}} from timed tasks (keys
    end with `suffix`)."""
    return {
        member: {
            precision: {
                task: settings.generation_batch / seconds[(member, task, precision, *suffix)]
                for task in ("beam4", "greedy")
            }
            for precision in precisions
        }
        for member in members
    }


def engine_tasks(engine: "EngineProcess", paths: dict, settings: BenchmarkSettings) -> dict:
    """{(member + " (CTranslate2)", "beam4" | "greedy", precision[, SHORTLIST]): task}:
    CTranslate2's rows, each one request to `engine`."""
    tasks = {}
    for member in paths:
        for precision in ENGINE_PRECISIONS:
            for task, beams in (("beam4", 4), ("greedy", 1)):
                request = ((member, precision), beams, settings.new_tokens)
                tasks[f"{member} (CTranslate2)", task, precision] = lambda r=request: (
                    engine.request(r)
                )
                if settings.shortlist:
                    tasks[f"{member} (CTranslate2)", task, precision, SHORTLIST] = (
                        lambda r=(*request, True): engine.request(r)
                    )
    return tasks


def decoding_rows(
    size: str, models: dict, source: dict, settings: BenchmarkSettings, log=print
) -> tuple[dict, dict, dict, list]:
    """The decoding rows of `models` (every precision, with the shortlist, CTranslate2's), warmed up
    then timed interleaved: (seconds, first seconds, {member: what the inference copies tell:
    "int8_gemm_share", "shortlist_union"}, the CTranslate2 members). The inference copies live only
    for these rows: the training rows, timed after them, hold the optimizers' state instead, so the
    run never holds both (`memory_needed`)."""
    untimed, extras = untimed_paths(settings), {member: {} for member in models}
    copies = inference_copies(models, settings)
    tasks = generation_tasks(copies, source, settings)
    if settings.shortlist:
        tasks.update(shortlist_tasks(copies, source, settings))
    with tempfile.TemporaryDirectory() as directory:
        paths = ctranslate2_models(models, settings, directory, log) if settings.ctranslate2 else {}
        source_tokens = [[f"w{i}" for i in row] for row in source["input_ids"].tolist()]
        engine = EngineProcess(paths, settings.threads, source_tokens) if paths else None
        tasks.update(engine_tasks(engine, paths, settings))
        log(f"[{size}] warm-up of the decoding rows of {len(models)} models ...")
        first_seconds = {key: timed(task, settings.device) for key, task in tasks.items()}
        log(
            f"[{size}] timing {len(tasks)} decoding tasks x {settings.repeats} repeats, "
            "interleaved ..."
        )
        seconds = interleaved_medians(tasks, settings.repeats, settings.device)
        if engine:
            engine.close()
    precisions = timed_precisions(settings)
    if settings.shortlist:
        for member in models.keys() - {MARIAN}:
            union = copies[member, precisions[0]].shortlist.candidates(source["input_ids"].cpu())
            extras[member]["shortlist_union"] = len(union)
    if settings.gemm_share and PROFILED_MEMBER in models and "int8_gemm_share" not in untimed:
        log(f"[{size}] profile of {PROFILED_MEMBER}'s int8 beam-4 decoding ...")
        # the timed int8 copy where there is one (another copy would compile its steps again)
        profiled = (
            copies[PROFILED_MEMBER, "int8"]
            if (PROFILED_MEMBER, "int8") in copies
            else inference_copy(models[PROFILED_MEMBER], "int8", settings.measure_refused)
        )
        extras[PROFILED_MEMBER]["int8_gemm_share"] = int8_gemm_share(
            profiled, source, settings.new_tokens, **decoding_options(PROFILED_MEMBER, settings)
        )
    return seconds, first_seconds, extras, list(paths)


def training_rows(
    size: str, models: dict, training_batches: dict, settings: BenchmarkSettings, log=print
) -> dict:
    """{(member, "train<length>" | "train_bf16"): seconds}: one optimizer step of each model on each
    batch (and under bfloat16 autocast at the headline length), warmed up then timed interleaved.
    The optimizers (Adam's state: twice the float32 weights) live only for these rows."""
    optimizers = {member: make_optimizer(model) for member, model in models.items()}
    time_bf16 = settings.train_bf16 and "train_bf16" not in untimed_paths(settings)
    tasks = {}
    for member, model in models.items():
        optimizer = optimizers[member]
        for length, batch in training_batches.items():
            tasks[member, f"train{length}"] = lambda m=model, o=optimizer, b=batch: training_step(
                m, o, b, settings.device
            )
        if time_bf16:
            batch = training_batches[settings.headline_length]
            tasks[member, "train_bf16"] = lambda m=model, o=optimizer, b=batch: training_step(
                m, o, b, settings.device, bf16=True
            )
    log(f"[{size}] warm-up of the training rows of {len(models)} models ...")
    for task in tasks.values():
        task()
    log(
        f"[{size}] timing {len(tasks)} training tasks x {settings.repeats} repeats, interleaved ..."
    )
    return interleaved_medians(tasks, settings.repeats, settings.device)


def benchmark_size(size: str, settings: BenchmarkSettings, log=print) -> tuple[dict, dict]:
    """All measurements of one model size: ({member: {...}}, {engine member: {precision:
    rates}}). The decoding rows are timed first, then the training rows: ratios are read within
    each, and neither's memory is held during the other."""
    device = settings.device
    members = list(settings.members or [*registered_members(), MARIAN])
    precisions, untimed = timed_precisions(settings), untimed_paths(settings)
    models = {}
    for member in members:
        torch.manual_seed(0)
        model = build_model(member, size, settings.vocab_size).to(device)
        models[member] = compiled(model) if settings.compile and member != MARIAN else model
    check_memory(models, settings, log)
    source = to_device(
        random_batch(
            settings.generation_batch, settings.source_length, 1, settings.vocab_size, seed=1
        ),
        device,
    )
    training_batches = {
        length: to_device(
            random_batch(
                batch_size_for(length, settings.token_budget), length, length, settings.vocab_size
            ),
            device,
        )
        for length in settings.lengths
    }
    seconds, first_seconds, extras, engine_members = decoding_rows(
        size, models, source, settings, log
    )
    seconds.update(training_rows(size, models, training_batches, settings, log))
    results = {}
    rates = generation_rates(seconds, members, precisions, settings)
    for member in members:
        row = {
            "parameters": sum(p.numel() for p in models[member].parameters()),
            "decode_matmul_weights_per_token": decode_matmul_weights(models[member]),
            "beam4_sentences_per_s": rates[member]["float32"]["beam4"],
            "greedy_sentences_per_s": rates[member]["float32"]["greedy"],
            "generation": rates[member],
            "train": {},
        }
        if decoding_options(member, settings):
            row["first_decode_s"] = {
                precision: {task: first_seconds[member, task, precision] for task in SEARCHES}
                for precision in precisions
            }
        if settings.shortlist and member != MARIAN:
            row["generation_shortlist"] = generation_rates(
                seconds, [member], precisions, settings, SHORTLIST
            )[member]
        for length, batch in training_batches.items():
            step = seconds[member, f"train{length}"]
            batch_size = batch["input_ids"].shape[0]
            flops = training_flops(models[member], batch_size, length, length)
            row["train"][length] = {
                "batch": batch_size,
                "tokens_per_s": 2 * batch_size * length / step,
                "step_s": step,
                "flops_per_step": flops,
                "flops_per_s": flops / step,
            }
        if settings.train_bf16 and "train_bf16" not in untimed:
            step = seconds[member, "train_bf16"]
            row["train_bf16"] = {
                "length": settings.headline_length,
                "step_s": step,
                "tokens_per_s": 2
                * training_batches[settings.headline_length]["input_ids"].numel()
                / step,
            }
        results[member] = row | extras[member]
    engine_names = sorted(f"{member} (CTranslate2)" for member in engine_members)
    engines = generation_rates(seconds, engine_names, ENGINE_PRECISIONS, settings)
    if settings.shortlist:
        engines.update(
            {
                f"{member} {SHORTLIST}": rates
                for member, rates in generation_rates(
                    seconds, engine_names, ENGINE_PRECISIONS, settings, SHORTLIST
                ).items()
            }
        )
    del models
    if settings.measure_memory:
        for member in members:
            log(f"[{size}] peak training memory of {member} ...")
            results[member]["train_peak_memory_bytes"] = training_peak_memory(
                member, size, settings.headline_length, settings
            )
    return results, engines


def benchmark_depth_pair(settings: BenchmarkSettings, log=print) -> dict:
    """The comparison of Xu et al. 2024, Table 6 at base size (DEPTH_PAIR): decoding speed of the
    12+12 depth-wise LSTM and the 24+24 residual pre-norm model in every precision, interleaved.
    {model: {precision: rates}}."""
    models = {}
    for member, layers in DEPTH_PAIR.items():
        torch.manual_seed(0)
        name = f"{member} {layers['encoder_layers']}+{layers['decoder_layers']}"
        models[name] = build_model(member, "base", settings.vocab_size, **layers).to(
            settings.device
        )
    check_memory(models, settings, log, training=False)
    source = to_device(
        random_batch(
            settings.generation_batch, settings.source_length, 1, settings.vocab_size, seed=1
        ),
        settings.device,
    )
    tasks = generation_tasks(inference_copies(models, settings), source, settings)
    log(
        f"[depth pair] warm-up and timing {len(tasks)} tasks x {settings.repeats} repeats, "
        "interleaved ..."
    )
    for task in tasks.values():
        task()
    seconds = interleaved_medians(tasks, settings.repeats, settings.device)
    rates = generation_rates(seconds, list(models), timed_precisions(settings), settings)
    return {
        name: {"parameters": sum(p.numel() for p in model.parameters()), "generation": rates[name]}
        for name, model in models.items()
    }


def refused_routes() -> dict:
    """{"bfloat16" | "int8": why} for each low-precision route this CPU refuses to users: bfloat16
    without native support (`prepare_for_inference`, and --bf16 training), int8 without a fast
    kernel (`int8_route`)."""
    features, refused = cpu_features(), {}
    if not features.native_bfloat16:
        refused["bfloat16"] = "no native bfloat16: no AVX-512 BF16 or AMX"
    try:
        int8_route(features)
    except ValueError:
        refused["int8"] = "no fast int8 kernel: no VNNI or AMX, and no fbgemm"
    return refused


def refused_paths(settings: BenchmarkSettings) -> dict:
    """{path: why} for the paths of `settings` that this CPU refuses to users (`refused_routes`):
    generation precisions (keys of PRECISIONS), "train_bf16" and "int8_gemm_share"."""
    if settings.device != "cpu":
        return {}
    routes = {
        precision: [
            route
            for route, used in (
                ("bfloat16", PRECISIONS[precision][0] == "bfloat16"),
                ("int8", PRECISIONS[precision][1] == "int8"),
            )
            if used
        ]
        for precision in settings.precisions
    }
    routes.update({"train_bf16": ["bfloat16"]} if settings.train_bf16 else {})
    routes.update({"int8_gemm_share": ["int8"]} if settings.gemm_share else {})
    refused = refused_routes()
    return {
        path: "; ".join(refused[route] for route in used if route in refused)
        for path, used in routes.items()
        if set(used) & set(refused)
    }


def described(paths: dict) -> str:
    """`refused_paths` ({path: why}) in words."""
    return "; ".join(
        f"{PATH_NAMES.get(path, f'{path} decoding')} ({why})" for path, why in paths.items()
    )


def untimed_paths(settings: BenchmarkSettings) -> dict:
    """`refused_paths` unless `settings.measure_refused`: {path: why} of what the run lists without
    timing it."""
    return {} if settings.measure_refused else refused_paths(settings)


def timed_precisions(settings: BenchmarkSettings) -> tuple:
    """The generation precisions of `settings` that the run times (`untimed_paths` left out)."""
    untimed = untimed_paths(settings)
    return tuple(precision for precision in settings.precisions if precision not in untimed)


def cpu_identity() -> dict:
    """The CPU's model name and its vector-instruction flags (AVX, AVX-512, AMX, VNNI, FMA), from
    /proc/cpuinfo."""
    fields = cpuinfo()
    if not fields:
        return {"cpu_model": None, "cpu_flags": None}
    flags = sorted(
        flag
        for flag in fields.get("flags", "").split()
        if flag.startswith(("avx", "amx", "fma")) or "vnni" in flag
    )
    return {"cpu_model": fields.get("model name"), "cpu_flags": " ".join(flags)}


def cpu_routes() -> dict:
    """What the CPU offers and which low-precision route `prepare_for_inference` takes on it, for
    the report."""
    features, refused = cpu_features(), refused_routes()
    return {
        "cpu": features.describe(),
        "cpu_capability": features.capability,
        **cpu_identity(),
        "int8_route": "refused (no fast int8 kernel)"
        if "int8" in refused
        else int8_route(features),
        "bfloat16_route": "refused for users (no native bfloat16)"
        if "bfloat16" in refused
        else "native",
    }


def run_benchmark(settings: BenchmarkSettings, log=print) -> dict:
    settings.check()
    if settings.device == "cpu":
        torch.set_num_threads(settings.threads)
        if settings.keep_freed_memory:  # before any row: every row, float32 too, runs with it
            keep_freed_memory()
    dtype = torch.bfloat16 if settings.device == "cuda" else torch.float32
    report = {
        "settings": asdict(settings),
        "machine": {
            "device": torch.cuda.get_device_name()
            if settings.device == "cuda"
            else f"CPU, {torch.get_num_threads()} threads",
            "dtype": str(dtype).removeprefix("torch."),
            "torch": torch.__version__,
            **cpu_routes(),
            # glibc told to keep freed memory (keep_freed_memory)
            "freed_memory_kept": freed_memory_kept(),
            # the best of the measurements before and after the models run
            "matmul_peak_flops_per_s": None,
            "matmul_peak_measurements": [
                matmul_peak_flops(settings.device, dtype, settings.peak_matmul_size)
            ],
        },
        "refused_paths": refused_paths(settings),  # timed only with measure_refused
        "sizes": {},
    }
    report["engines"], report["step_matmul_rates"] = {}, {}
    untimed = untimed_paths(settings)
    if untimed:
        log(
            "Not timed, refused to users on this CPU (measure_refused times them): "
            f"{described(untimed)}."
        )
    for size in settings.sizes:
        report["sizes"][size], engines = benchmark_size(size, settings, log)
        if engines:
            report["engines"][size] = engines
        # what bf16 training can gain: only beside it
        if settings.train_bf16 and "train_bf16" not in untimed:
            report["step_matmul_rates"][size] = step_matmul_rates(size, settings)
    if settings.depth_pair:
        report["depth_pair"] = benchmark_depth_pair(settings, log)
    # One measurement can come out low (in one deployment run: 159 GFLOP/s against 198 minutes
    # earlier), which would overstate every share of the peak: measure again at the end and keep
    # the best.
    measurements = report["machine"]["matmul_peak_measurements"]
    measurements.append(matmul_peak_flops(settings.device, dtype, settings.peak_matmul_size))
    report["machine"]["matmul_peak_flops_per_s"] = max(measurements)
    report["targets"] = check_targets(report, settings)
    return report


def fastest_path(rates: dict, task: str) -> tuple[str, float]:
    """(precision, sentences/s) of the fastest precision in `rates` ({precision: {task:
    sentences/s}})."""
    precision = max(rates, key=lambda name: rates[name][task])
    return precision, rates[precision][task]


@dataclass
class Measured:
    """What the targets are checked on: one size's rows of a report, and what the run's CPU refuses
    its users."""

    report: dict
    size: str
    headline_length: int

    @property
    def rows(self) -> dict:
        return self.report["sizes"][self.size]

    def engine(self, member: str, suffix: str = "") -> dict | None:
        """CTranslate2's int8 rates of `member` ({task: sentences/s}; `suffix` SHORTLIST: with
        `use_vmap`)."""
        name = f"{member} (CTranslate2)" + (f" {suffix}" if suffix else "")
        return self.report["engines"].get(self.size, {}).get(name, {}).get("int8")

    @property
    def anchor(self) -> dict | None:
        return self.engine(MARIAN)

    @property
    def bfloat16_refused(self) -> bool:
        return self.report["machine"].get("bfloat16_route", "native").startswith("refused")

    @property
    def int8_refused(self) -> bool:
        return self.report["machine"].get("int8_route", "").startswith("refused")

    @property
    def untimed(self) -> dict:
        """{path: why} of the paths the run listed as refused to users without timing them."""
        return untimed_in(self.report)

    def refuses(self, path: str) -> bool:
        """Whether this CPU refuses generation in `path` (a key of PRECISIONS) to users."""
        dtype, quantize = PRECISIONS[path]
        return (
            dtype == "bfloat16"
            and self.bfloat16_refused
            or quantize == "int8"
            and self.int8_refused
        )

    @property
    def cpu_class(self) -> str:
        """The class whose minimums apply: "AVX-512 VNNI / AMX" where the run's int8 route is
        torch._int_mm's (int8 dot products), else "AVX2"."""
        return (
            "AVX-512 VNNI / AMX" if self.report["machine"].get("int8_route") == "int_mm" else "AVX2"
        )

    def user_paths(self, rates: dict) -> dict:
        """`rates` ({precision: rates}) without the paths this CPU refuses to users."""
        return {path: rate for path, rate in rates.items() if not self.refuses(path)}


def untimed_in(report: dict) -> dict:
    """{path: why} of the paths a report lists as refused to users on its CPU without having timed
    them (none in a run with measure_refused, or in a report written before refused paths were
    left out)."""
    return {} if report["settings"].get("measure_refused") else report.get("refused_paths", {})


def target_row(
    target: str,
    measured: Measured,
    ratio: float | None,
    minimum: float | None,
    compared: str,
    refused: bool = False,
    unit: str = "x",
) -> dict:
    """One checked target: `ratio` against `minimum` (None: reported, not a target); `refused`: the
    path is refused to users on this CPU, so the target does not apply (its ratio is None where the
    run did not time it). `unit`: "x" for a ratio, "share" for a fraction of a whole."""
    met = None if refused or minimum is None else ratio >= minimum
    verdict = (
        "refused on this CPU"
        if refused
        else "reported"
        if minimum is None
        else "met"
        if met
        else "missed"
    )
    return dict(
        target=target,
        size=measured.size,
        ratio=ratio,
        minimum=minimum,
        compared=compared,
        met=met,
        verdict=verdict,
        unit=unit,
    )


def check_precision_vs_float32(name: str, options: dict, measured: Measured) -> list[dict]:
    """Each member's decoding in `options["precision"]` against its own float32, beam 4 and
    greedy."""
    precision, checks = options["precision"], []
    refused = measured.refuses(precision)
    route = (
        f" ({measured.report['machine'].get('int8_route', '?')} route)"
        if precision == "int8" and not refused
        else ""
    )
    for member in options["members"]:
        rates = measured.rows.get(member, {}).get("generation", {})
        untimed = bool(rates) and precision in measured.untimed
        for task in SEARCHES if precision in rates or untimed else ():
            ratio = None if untimed else rates[precision][task] / rates["float32"][task]
            checks.append(
                target_row(
                    f"{name}, {member} ({task})",
                    measured,
                    ratio,
                    options["minimum"],
                    f"{member} {precision}{route} / float32",
                    refused,
                )
            )
    return checks


def check_path_vs_engine(name: str, options: dict, measured: Measured) -> list[dict]:
    """A member's generate() in `options["precision"]` (None: its fastest path users are offered)
    against CTranslate2 int8 Marian; `options["minimums"]` per task, or per CPU class
    (`Measured.cpu_class`) and task."""
    member, checks = options["member"], []
    if not measured.anchor or member not in measured.rows:
        return checks
    generation = measured.rows[member]["generation"]
    rates = measured.user_paths(generation)
    minimums = options["minimums"].get(measured.cpu_class, options["minimums"])
    for task, minimum in minimums.items():
        path = options["precision"] or fastest_path(rates, task)[0]
        compared = f"{member} generate() {path} / Marian CTranslate2 int8"
        if path in rates:
            checks.append(
                target_row(
                    f"{name} ({task})",
                    measured,
                    rates[path][task] / measured.anchor[task],
                    minimum,
                    compared,
                )
            )
        elif path in generation or path in measured.untimed:  # a path this CPU refuses to users
            ratio = generation[path][task] / measured.anchor[task] if path in generation else None
            checks.append(
                target_row(f"{name} ({task})", measured, ratio, minimum, compared, refused=True)
            )
    return checks


def check_export_vs_engine(name: str, options: dict, measured: Measured) -> list[dict]:
    """Our CTranslate2 export of a member against CTranslate2's own Marian, both int8."""
    export = measured.engine(options["member"])
    if not (measured.anchor and export):
        return []
    return [
        target_row(
            f"{name} ({task})",
            measured,
            export[task] / measured.anchor[task],
            minimum,
            f"{options['member']} CTranslate2 int8 (our export) / Marian CTranslate2 int8",
        )
        for task, minimum in options["minimums"].items()
    ]


def check_shortlist_vs_engine(name: str, options: dict, measured: Measured) -> list[dict]:
    """A member's fastest path with the shortlist against CTranslate2 int8 Marian with the same
    table (`use_vmap`), and what each side gains from its shortlist (reported)."""
    member, with_table, checks = options["member"], measured.engine(MARIAN, SHORTLIST), []
    row = measured.rows.get(member, {})
    if not (measured.anchor and with_table and "generation_shortlist" in row):
        return checks
    ours, without = (
        measured.user_paths(row["generation_shortlist"]),
        measured.user_paths(row["generation"]),
    )
    for task, minimum in options["minimums"].items():
        path, rate = fastest_path(ours, task)
        checks += [
            target_row(
                f"{name} ({task})",
                measured,
                rate / with_table[task],
                minimum,
                f"{member} {path} with the shortlist / Marian CTranslate2 int8 with use_vmap",
            ),
            target_row(
                f"shortlist gain, {member} ({task})",
                measured,
                rate / fastest_path(without, task)[1],
                None,
                f"{member} fastest path with / without the shortlist",
            ),
            target_row(
                f"shortlist gain, CTranslate2 int8 Marian ({task})",
                measured,
                with_table[task] / measured.anchor[task],
                None,
                "use_vmap / without",
            ),
        ]
    return checks


def check_gemm_share(name: str, options: dict, measured: Measured) -> list[dict]:
    """The profiled share of a member's int8 beam-4 decoding spent in int8 matrix products
    (`int8_gemm_share`)."""
    profiled = measured.rows.get(options["member"], {}).get("int8_gemm_share")
    if not profiled:
        untimed = options["member"] in measured.rows and "int8_gemm_share" in measured.untimed
        return (
            [
                target_row(
                    name,
                    measured,
                    None,
                    options["minimum"],
                    "int8 products / one beam-4 generate()",
                    refused=True,
                    unit="share",
                )
            ]
            if untimed
            else []
        )
    return [
        target_row(
            name,
            measured,
            profiled["share"],
            options["minimum"],
            f"{profiled['op']} / one beam-4 generate() ({profiled['route']} route, torch.profiler)",
            measured.int8_refused,
            unit="share",
        )
    ]


def check_bf16_training(name: str, options: dict, measured: Measured) -> list[dict]:
    """Each member's bf16 / fp32 training tokens/s against a share of the bf16 / fp32 matmul rate
    measured at the step's shapes in the same run (`step_matmul_rates`), and at least
    `options["minimum"]` (said to be out of reach where that rate is below it); refused, without a
    ratio or a minimum, where the run did not time bf16 training because this CPU refuses it."""
    if "train_bf16" in measured.untimed:
        return [
            target_row(
                f"{name}, {member}",
                measured,
                None,
                None,
                f"{member} bf16 autocast / float32 tokens/s",
                refused=True,
            )
            for member in measured.rows
        ]
    matmul = measured.report.get("step_matmul_rates", {}).get(measured.size)
    if not matmul:
        return []
    share, matmul_ratio = options["share_of_matmul_ratio"], matmul["bfloat16_over_float32"]
    # where the products alone gain less than the floor, no step can reach it: say so beside the
    # verdict rather than leave a bare "missed"
    beyond = (
        f"; out of reach on this CPU: the products alone gain {matmul_ratio:.2f}x"
        if matmul_ratio < options["minimum"]
        else ""
    )
    checks = []
    for member, row in measured.rows.items():
        if "train_bf16" in row and row["train_bf16"]["length"] in row["train"]:
            fp32 = row["train"][row["train_bf16"]["length"]]["tokens_per_s"]
            checks.append(
                target_row(
                    f"{name}, {member}",
                    measured,
                    row["train_bf16"]["tokens_per_s"] / fp32,
                    max(share * matmul_ratio, options["minimum"]),
                    f"{member} bf16 autocast / float32 tokens/s; needed: {share} x the bf16 / "
                    f"fp32 matmul rate at the step's shapes ({matmul_ratio:.2f}x), at least "
                    f"{options['minimum']:g}x{beyond}",
                    measured.bfloat16_refused,
                )
            )
    return checks


def check_depth_pair(name: str, options: dict, measured: Measured) -> list[dict]:
    """Xu et al. 2024, Table 6's pair, each at its fastest path users are offered; float32 reported
    beside it."""
    if "depth_pair" not in measured.report:
        return []
    deep, shallow = (
        measured.user_paths(row["generation"]) for row in measured.report["depth_pair"].values()
    )
    checks = []
    for task, minimum in options["minimums"].items():
        path, rate = fastest_path(deep, task)
        checks += [
            target_row(
                f"{name} ({task}, fastest precision)",
                measured,
                rate / fastest_path(shallow, task)[1],
                minimum,
                f"each model's fastest precision ({path} for the depth-wise LSTM)",
            ),
            target_row(
                f"{name} ({task}, float32)",
                measured,
                deep["float32"][task] / shallow["float32"][task],
                None,
                "float32",
            ),
        ]
    return checks


def check_matmul_share(name: str, options: dict, measured: Measured) -> list[dict]:
    """A member's fp32 training FLOP/s at the headline length against the square-matmul peak."""
    if options["member"] not in measured.rows:
        return []
    train = measured.rows[options["member"]]["train"][measured.headline_length]
    return [
        target_row(
            name,
            measured,
            train["flops_per_s"] / measured.report["machine"]["matmul_peak_flops_per_s"],
            options["minimum"],
            f"training FLOP/s at length {measured.headline_length} / square-matmul FLOP/s",
            unit="share",
        )
    ]


TARGET_CHECKS = {
    "precision_vs_float32": check_precision_vs_float32,
    "path_vs_engine": check_path_vs_engine,
    "export_vs_engine": check_export_vs_engine,
    "shortlist_vs_engine": check_shortlist_vs_engine,
    "gemm_share": check_gemm_share,
    "bf16_training": check_bf16_training,
    "depth_pair": check_depth_pair,
    "matmul_share": check_matmul_share,
}


def check_targets(report: dict, settings: BenchmarkSettings) -> list[dict]:
    """The deployment run's `TARGETS` at the largest measured size: each ratio with the paths it
    compares, its minimum and its verdict (met, missed, reported: not a target, or refused on this
    CPU). Targets whose rows were not measured are left out."""
    size = "base" if "base" in report["sizes"] else settings.sizes[-1]
    measured = Measured(report, size, settings.headline_length)
    return [
        check
        for name, kind, options in TARGETS
        for check in TARGET_CHECKS[kind](name, options, measured)
    ]


def format_report(report: dict) -> str:
    """Markdown tables: training and float32 generation per size, generation by precision (and
    engine), the depth pair, then the targets. Paths refused to users on the CPU are listed with the
    reason, and marked "refused" where the run did not time them."""
    settings, machine = report["settings"], report["machine"]
    peak = machine["matmul_peak_flops_per_s"]
    headline = settings["headline_length"]
    untimed = untimed_in(report)

    # None for each precision refused and not timed, in the settings' order
    def with_untimed(rates: dict) -> dict:
        return {
            precision: rates.get(precision)
            for precision in dict.fromkeys([*settings["precisions"], *rates])
            if precision in rates or precision in untimed
        }

    lines = [
        f"Device: {machine['device']}, {machine['dtype']}, torch {machine['torch']}; CPU "
        f"{machine.get('cpu', '?')} ({machine.get('cpu_model') or 'model not read'}; flags "
        f"{machine.get('cpu_flags') or 'not read'}; freed memory "
        f"{'kept' if machine.get('freed_memory_kept') else 'returned to the system'}), int8 "
        f"route {machine.get('int8_route', '?')}, bfloat16 {machine.get('bfloat16_route', '?')}; "
        f"measured matmul peak {peak / 1e9:.0f} GFLOP/s. Generation: "
        f"{settings['generation_batch']} sources of {settings['source_length']} tokens, "
        f"{settings['new_tokens']} new tokens forced. Training: {settings['token_budget']} "
        f"source+target tokens per batch, Adam; medians of {settings['repeats']} interleaved "
        "repeats.",
    ]
    if report.get("refused_paths"):
        timed = (
            "timed anyway (--measure_refused)"
            if settings.get("measure_refused")
            else "not timed (--measure_refused times them)"
        )
        lines += [
            "",
            f"Refused to users on this CPU, {timed}: {described(report['refused_paths'])}.",
        ]
    if settings.get("compile_decoding"):
        first = [
            seconds
            for rows in report["sizes"].values()
            for row in rows.values()
            for rates in row.get("first_decode_s", {}).values()
            for seconds in rates.values()
        ]
        lines += [
            "",
            "The family decodes with compiled steps (`compile_decoding=True`; Marian and "
            "CTranslate2 as they "
            f"are). Each path's first decode, which compiles, is the warm-up: {min(first):.0f}-"
            f"{max(first):.0f} s.",
        ]
    for size, rows in report["sizes"].items():
        lengths = list(next(iter(rows.values()))["train"])
        bf16 = any("train_bf16" in row for row in rows.values()) or "train_bf16" in untimed
        profiled = any("int8_gemm_share" in row for row in rows.values())
        lines += ["", f"**{size}**", ""]
        header = [
            "model",
            "params (M)",
            "decode matmul weights/token (M)",
            "beam-4 sent/s",
            "greedy sent/s",
        ]
        header += [f"train tok/s @{length}" for length in lengths] + (
            [f"bf16 train tok/s @{headline}"] if bf16 else []
        )
        header += [f"GFLOP/s @{headline} (of peak)", "train peak mem (MiB)"]
        header += ["int8 GEMM share, beam 4"] if profiled else []
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for member, row in rows.items():
            train = row["train"]
            achieved = (
                train[headline]["flops_per_s"]
                if headline in train
                else train[lengths[0]]["flops_per_s"]
            )
            memory = row.get("train_peak_memory_bytes")
            cells = [
                member,
                f"{row['parameters'] / 1e6:.2f}",
                f"{row['decode_matmul_weights_per_token'] / 1e6:.1f}",
                f"{row['beam4_sentences_per_s']:.1f}",
                f"{row['greedy_sentences_per_s']:.1f}",
            ]
            cells += [f"{train[length]['tokens_per_s']:,.0f}" for length in lengths]
            cells += (
                [
                    f"{row['train_bf16']['tokens_per_s']:,.0f}"
                    if "train_bf16" in row
                    else "refused"
                    if "train_bf16" in untimed
                    else "-"
                ]
                if bf16
                else []
            )
            cells += [
                f"{achieved / 1e9:.0f} ({achieved / peak:.0%})",
                f"{memory / 2**20:,.0f}" if memory else "-",
            ]
            cells += [gemm_share_cell(row.get("int8_gemm_share"))] if profiled else []
            lines.append("| " + " | ".join(cells) + " |")
        generation = {member: with_untimed(row["generation"]) for member, row in rows.items()}
        generation.update(
            {
                f"{member} {SHORTLIST} ({row['shortlist_union']} words)": with_untimed(
                    row["generation_shortlist"]
                )
                for member, row in rows.items()
                if "generation_shortlist" in row
            }
        )
        generation.update(report.get("engines", {}).get(size, {}))
        if len(settings["precisions"]) > 1 or len(generation) > len(rows):
            lines += [
                "",
                f"Generation at {size}, sentences/s (and x Marian float32) by precision:",
                "",
            ]
            lines += generation_table(
                generation, rows.get(MARIAN, {}).get("generation", {}).get("float32")
            )
        if size in report.get("step_matmul_rates", {}):
            rates = report["step_matmul_rates"][size]
            lines += [
                "",
                f"Matmuls at the training step's shapes at {size}: float32 "
                f"{rates['float32_flops_per_s'] / 1e9:.0f}, bfloat16 "
                f"{rates['bfloat16_flops_per_s'] / 1e9:.0f} GFLOP/s ("
                f"{rates['bfloat16_over_float32']:.2f}x).",
            ]
    if report.get("depth_pair"):
        lines += [
            "",
            "Xu et al. 2024, Table 6's pair at base, decoding sentences/s by precision:",
            "",
        ]
        lines += generation_table(
            {name: with_untimed(row["generation"]) for name, row in report["depth_pair"].items()},
            None,
        )
    if report.get("targets"):
        lines += [
            "",
            "| target | needed | measured | compared | verdict |",
            "|---|---|---|---|---|",
        ]
        lines += [target_line(check) for check in report["targets"]]
    return "\n".join(lines)


def target_line(check: dict) -> str:
    """A row of the targets table: needed, measured, what is compared, and met / MISSED / reported /
    refused."""

    def value(number):
        if number is None:  # a refused path the run did not time
            return "not timed"
        return f"{number:.0%}" if check.get("unit") == "share" else f"{number:.2f}x"

    needed = "-" if check["minimum"] is None else f">= {value(check['minimum'])}"
    # Reports written before the verdicts existed have `met` alone: True, False or None (not a
    # target).
    verdict = (
        check.get("verdict") or {True: "met", False: "missed", None: "reported"}[check.get("met")]
    )
    verdict = "MISSED" if verdict == "missed" else verdict
    return (
        f"| {check['target']} [{check['size']}] | {needed} | {value(check['ratio'])} | "
        f"{check['compared']} | {verdict} |"
    )


def gemm_share_cell(profiled: dict | None) -> str:
    """The `int8_gemm_share` of a row for the size's table."""
    if not profiled:
        return "-"
    return (
        f"{profiled['share']:.0%} ({profiled['op']}, {profiled['int8_gemm_s']:.2f} of "
        f"{profiled['decode_s']:.2f} s)"
    )


def generation_table(generation: dict, reference: dict | None) -> list[str]:
    """Rows of {model: {precision: {task: sentences/s}}}; ratios to `reference` ({task:
    sentences/s}) if given. A precision whose rates are None was refused on this CPU and not
    timed."""
    precisions = list(
        dict.fromkeys(precision for rates in generation.values() for precision in rates)
    )
    header = ["model"] + [
        f"{precision} {task}" for precision in precisions for task in ("beam4", "greedy")
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for model, rates in generation.items():
        cells = [model]
        for precision in precisions:
            for task in ("beam4", "greedy"):
                if precision in rates and rates[precision] is None:
                    cells.append("refused")
                    continue
                rate = rates.get(precision, {}).get(task)
                ratio = f" ({rate / reference[task]:.2f}x)" if rate and reference else ""
                cells.append(f"{rate:.1f}{ratio}" if rate else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_report(report: dict, path: str | Path):
    """Write the report as JSON, atomically (a temp file, then rename)."""
    atomic_write_json(path, report)


def kept_reports(path: str | Path) -> dict[str, dict]:
    """The reports kept in a records file (experiments/speed/records/CLASS.json: one file per CPU
    class, its runs grouped by the code they measured), by run name. Each report gains `kept`: the
    version's commit, date, conditions and command."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(
            f"No records file {path}; the kept ones are in experiments/speed/records/."
        ) from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error}); restore it from git.") from None
    if not isinstance(value, dict) or "versions" not in value:
        raise ValueError(
            f"{path} is not a speed records file (no `versions`): give one of "
            "experiments/speed/records/, or a single report's JSON to format_report."
        )
    return {
        run: {**report, "kept": {key: version[key] for key in ("code", "date", "when", "command")}}
        for version in value["versions"]
        for run, report in version["runs"].items()
    }


def kept_report(path: str | Path, run: str) -> dict:
    """One run's report from a records file (`kept_reports`)."""
    reports = kept_reports(path)
    if run not in reports:
        raise ValueError(f"{path} keeps no run {run!r}; it keeps {', '.join(reports)}.")
    return reports[run]


__all__ = [
    "SIZES",
    "TARGETS",
    "PRECISIONS",
    "ENGINE_PRECISIONS",
    "DEPTH_PAIR",
    "BenchmarkSettings",
    "registered_members",
    "build_model",
    "inference_copy",
    "random_words_tokenizer",
    "ctranslate2_models",
    "ctranslate2_translators",
    "EngineProcess",
    "training_flops",
    "synthetic_shortlist",
    "inference_copies",
    "shortlist_tasks",
    "int8_gemm_share",
    "step_matmul_rates",
    "decode_matmul_weights",
    "matmul_peak_flops",
    "training_step",
    "generate_forced",
    "decoding_comparison_inputs",
    "compare_decoding_variants",
    "translate_forced",
    "benchmark_depth_pair",
    "refused_routes",
    "refused_paths",
    "run_benchmark",
    "NotEnoughMemory",
    "check_targets",
    "format_report",
    "write_report",
    "kept_reports",
    "kept_report",
]
