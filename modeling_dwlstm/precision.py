"""Low precision for inference: bfloat16 weights and int8 dynamic quantisation of every projection.

`prepare_for_inference(model, quantize="int8")` changes a loaded model in place and returns it,
still a `PreTrainedModel` that `generate()`, the translation pipeline and `dwlstm-evaluate` take:

    model = prepare_for_inference(AutoModelForSeq2SeqLM.from_pretrained("my-model"), quantize="int8")
    translator = pipeline("translation_en_to_de", model=model, tokenizer=AutoTokenizer.from_pretrained("my-model"))

`precision="auto"` takes the precision measured fastest on this CPU's class (`CPU_CLASSES`; bfloat16
on a GPU).

- bfloat16: every parameter and buffer cast (faster than autocast in every model we measured, and
  half the memory); beams are scored on float32 logits. Only CPUs with native bfloat16 (AVX-512
  BF16, AMX) gain speed. There each `nn.Linear` also keeps its weight in oneDNN's blocked layout
  (`PackedBfloat16Projection`; `pack_weights=False` leaves it out), which PyTorch's product
  otherwise reorders at every call: the same numbers, faster at the few rows of a decoding step.
- int8: every `nn.Linear`, subclasses included (the fused attention projections, the depth-wise LSTM
  gates, and the output projection unless `quantize_output_projection=False`: a third of a decode
  step at a 32k vocabulary, for no measurable BLEU), computes W8A8 with int32 products
  (`Int8Projection`, `FbgemmInt8Projection`). Each module keeps its place and attributes, so torchao
  and PEFT still see every projection. Not a library: torchao's dynamic int8 runs no int8 kernel on
  a CPU, and `quantize_dynamic` is deprecated and skips `nn.Linear` subclasses. Quantising `lm_head`
  unties it from the embedding. Under torch.compile the fbgemm route's product is the custom
  operator `fbgemm_unit_range_linear` (torch.compile cannot trace fbgemm's packed weights).

A prepared model is for inference only: saving it or preparing it again is refused. The
measurements behind these choices: the repository's docs/speed.md and experiments/speed/README.md.
"""  # noqa: E501

import functools
import os
import re
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
QUANTIZATIONS = ("none", "int8")
# The inference precisions, each a (dtype, quantize) of `prepare_for_inference`; "auto" picks one
# (`fastest_precision`).
PRECISIONS = {
    "float32": ("float32", "none"),
    "bfloat16": ("bfloat16", "none"),
    "int8": ("float32", "int8"),
    "bfloat16+int8": ("bfloat16", "int8"),
}
AUTO = "auto"
OUTPUT_PROJECTION = "lm_head"
# an all-zero row (a padded position) quantises to zeros instead of dividing by zero
SMALLEST_SCALE = 1e-12
INT8_ROUTES = ("int_mm", "fbgemm")
# fbgemm's (scale, zero point) for inputs in [-1, 1], as its dynamic quantisation
# (`quantized::linear_dynamic`, reduce_range) chooses them for that range; given, so that fbgemm
# skips its pass over the input for the range. Inputs quantise to 0..128 (+1 rounds up to 128):
# against weights within +-127 a pair of AVX2 multiply-adds stays inside int16 (2 x 128 x 127 =
# 32,512).
UNIT_RANGE_QUANTIZATION = (2 / 127, 64)
# torch.compile cannot trace fbgemm's packed weight (a ScriptObject), so a compiled projection calls
# `fbgemm_unit_range_linear`, which finds its packed weight here by a number: id(packed weight) ->
# packed weight, for as long as a module holds it. A copy of this file loaded as Hub remote code
# registers an operator of its own.
PACKED_WEIGHTS = weakref.WeakValueDictionary()
OPERATOR_NAMESPACE = re.sub(r"\W", "_", __name__)


@dataclass(frozen=True)
class CpuFeatures:
    """What decides which low-precision route is fast on this CPU."""

    # PyTorch's kernel level, torch.backends.cpu.get_cpu_capability(): "AVX2", "AVX512", ...
    capability: str
    # AVX-512 VNNI or AMX: int8 GEMMs (torch._int_mm) run at several times float32's rate
    int8_dot_products: bool
    native_bfloat16: bool  # AVX-512 BF16 or AMX: bfloat16 GEMMs run faster than float32 ones
    # AMX (tile matrix products in bfloat16 and int8), as oneDNN may use it
    matrix_tiles: bool = False

    def describe(self) -> str:
        extras = [
            name
            for name, present in (
                ("VNNI", self.int8_dot_products),
                ("BF16", self.native_bfloat16),
                ("AMX", self.matrix_tiles),
            )
            if present
        ]
        return self.capability + (
            f" with {' and '.join(extras)}" if extras else " (no VNNI, no native bfloat16)"
        )


def cpuinfo() -> dict[str, str]:
    """The fields of /proc/cpuinfo ("flags", "model name", ...; the first processor's where they
    repeat), {} where there is no such file."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    fields = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if colon:
            fields.setdefault(name.strip(), value.strip())
    return fields


@functools.cache
def cpu_features() -> CpuFeatures:
    """This CPU's features as the kernels will use them: the flags of /proc/cpuinfo, capped by the
    instruction level PyTorch dispatches to (ATEN_CPU_CAPABILITY) and oneDNN's (ONEDNN_MAX_CPU_ISA),
    so that imitating an older CPU with those variables imitates it here too. Without /proc/cpuinfo:
    no VNNI and no native bfloat16."""
    flags = set(cpuinfo().get("flags", "").split())
    capability = torch.backends.cpu.get_cpu_capability()
    onednn_isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    avx512 = capability.startswith("AVX512") and (
        onednn_isa == "ALL" or "AVX512" in onednn_isa or "AMX" in onednn_isa
    )
    return CpuFeatures(
        capability=capability,
        int8_dot_products=avx512 and bool(flags & {"avx512_vnni", "amx_int8"}),
        native_bfloat16=avx512 and bool(flags & {"avx512_bf16", "amx_bf16"}),
        matrix_tiles=avx512
        and (onednn_isa == "ALL" or "AMX" in onednn_isa)
        and bool(flags & {"amx_bf16", "amx_int8"}),
    )


@dataclass(frozen=True)
class CpuClass:
    """CPUs that decode alike (`matches`), and the precision whose beam-4 and greedy decoding was
    measured fastest on them (base models, 6+6 layers; the runs are in docs/inference.md and the
    repository's experiments/speed/)."""

    name: str
    matches: Callable[[CpuFeatures], bool]
    fastest: str  # a key of PRECISIONS
    measured: str  # the measurement behind `fastest`, in a few words


# What "auto" takes on a CPU: the first class that matches. Compiled decoding steps are left out of
# the choice.
CPU_CLASSES = (
    CpuClass(
        "AMX",
        lambda cpu: cpu.matrix_tiles and cpu.native_bfloat16 and cpu.int8_dot_products,
        "bfloat16",
        "Xeon with AMX-BF16/INT8, AVX-512 BF16 and VNNI, 2 threads, quiet, three runs: bfloat16 "
        "(packed weights) beam 4 2.05-2.19x, greedy 1.73-2.32x float32's speed; int8 1.56-1.62x / "
        "1.75-1.93x; bfloat16+int8 1.37-1.48x / 1.67-1.77x",
    ),
    CpuClass(
        "AVX-512 VNNI",
        lambda cpu: cpu.int8_dot_products,
        "int8",
        "AMD EPYC with AVX-512 BF16 and VNNI, no AMX, 2 threads, quiet, three runs: int8 beam 4 "
        "2.74-2.97x, greedy 2.36-3.17x float32's speed; bfloat16 (packed weights) 2.30-2.55x / "
        "2.53-2.71x; bfloat16+int8 2.42-3.07x / 2.18-2.87x",
    ),
    CpuClass(
        "AVX2",
        lambda cpu: cpu.capability.startswith("AVX") and fbgemm_available(),
        "int8",
        "AVX2 without VNNI (int8 by fbgemm), 2 threads, quiet: int8 beam 4 1.95x, greedy 2.58x "
        "float32's speed; bfloat16 refused (several times slower than float32)",
    ),
    CpuClass(
        "other",
        lambda cpu: True,
        "float32",
        "no fast int8 kernel and no native bfloat16 (not measured: float32 is the one fast path)",
    ),
)


def cpu_class(features: CpuFeatures | None = None) -> CpuClass:
    """The entry of `CPU_CLASSES` that this CPU (or `features`) belongs to."""
    features = features or cpu_features()
    return next(entry for entry in CPU_CLASSES if entry.matches(features))


def fastest_precision(device: str = "cpu", features: CpuFeatures | None = None) -> str:
    """The precision (a key of PRECISIONS) measured fastest for decoding on `device`: on a CPU, its
    class's entry in `CPU_CLASSES`; on a GPU bfloat16 where it has bfloat16 (int8 is a CPU route),
    else float32."""
    if device == "cpu":
        return cpu_class(features).fastest
    if device == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bfloat16"
    return "float32"


def precision_settings(precision: str, device: str = "cpu") -> tuple[str, str]:
    """(dtype, quantize) of `precision` ("auto" or a key of PRECISIONS) on `device`."""
    if precision == AUTO:
        precision = fastest_precision(device)
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision must be {AUTO} or one of {', '.join(PRECISIONS)}, got {precision!r}."
        )
    return PRECISIONS[precision]


def int8_route(features: CpuFeatures | None = None) -> str:
    """The int8 GEMM that is fast on this CPU: "int_mm" (torch._int_mm, per-token activation scales)
    with VNNI or AMX, else "fbgemm" (PyTorch's fbgemm int8 linear; int8 multiply-adds with
    AVX2/AVX-512, one activation scale per call), where torch._int_mm falls back to a path tens of
    times slower than float32."""
    features = features or cpu_features()
    if features.int8_dot_products:
        return "int_mm"
    if fbgemm_available():
        return "fbgemm"
    raise ValueError(
        f"int8 would be slower than float32 on this CPU ({features.describe()}): it has no int8 "
        "dot-product instructions and PyTorch has no fbgemm kernels here. Decode in float32."
    )


def fbgemm_available() -> bool:
    """Whether this PyTorch build has fbgemm's int8 kernels (x86 builds do)."""
    return "fbgemm" in torch.backends.quantized.supported_engines


def prepare_for_inference(
    model: nn.Module,
    dtype: str | torch.dtype = "float32",
    quantize: str = "none",
    quantize_output_projection: bool = True,
    allow_slow: bool = False,
    precision: str | None = None,
    pack_weights: bool = True,
) -> nn.Module:
    """Cast `model` to `dtype` ("float32", "bfloat16" or a torch dtype) and with quantize="int8"
    quantise every `nn.Linear` by the route fast on this CPU (`int8_route`), in place, in eval mode;
    returns it. bfloat16 on a CPU without native bfloat16 is refused (several times slower than
    float32) unless `allow_slow`; with native bfloat16 each projection's weight is also packed for
    oneDNN (`pack_bfloat16_weights`) unless `pack_weights=False` (the packed copies take as much
    memory again as the projections' bfloat16 weights). `precision` names both instead (a key of
    PRECISIONS, or "auto": `fastest_precision`), kept in `model.inference_precision`; "auto" does
    not compile decoding steps."""
    device = next(model.parameters()).device.type
    if precision is not None:
        if (torch_dtype(dtype), quantize) != (torch.float32, "none"):
            raise ValueError(
                f"precision={precision!r} sets the dtype and the quantisation itself: leave out "
                f"dtype and quantize (got dtype={dtype!r}, quantize={quantize!r})."
            )
        dtype, quantize = precision_settings(precision, device)
    check_precision(dtype, quantize, device, allow_slow)
    if has_quantized_projections(model):
        raise ValueError(
            "The model is already quantised: prepare a freshly loaded model (float32 or bfloat16)."
        )
    model.eval()
    model.to(torch_dtype(dtype))
    if quantize == "int8":
        quantize_int8(model, quantize_output_projection)
    elif pack_weights and torch_dtype(dtype) == torch.bfloat16 and packs_bfloat16_weights(device):
        pack_bfloat16_weights(model)
    model.inference_precision = precision_name(dtype, quantize)
    return model


def precision_name(dtype: str | torch.dtype, quantize: str) -> str:
    """The key of PRECISIONS for (dtype, quantize)."""
    dtype = str(torch_dtype(dtype)).removeprefix("torch.")
    return next(name for name, settings in PRECISIONS.items() if settings == (dtype, quantize))


def check_precision(
    dtype: str | torch.dtype, quantize: str, device: str = "cpu", allow_slow: bool = False
) -> None:
    """A one-line ValueError for an unknown dtype or quantisation, or for one that would be slower
    than float32 on this CPU (bfloat16 without native bfloat16, unless `allow_slow`; int8 without a
    fast int8 kernel)."""
    dtype = torch_dtype(dtype)
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZATIONS)}, got {quantize!r}.")
    if device != "cpu":
        return
    features = cpu_features()
    if dtype == torch.bfloat16 and not features.native_bfloat16 and not allow_slow:
        raise ValueError(
            "bfloat16 would decode several times slower than float32 on this CPU ("
            f"{features.describe()}; "
            "bfloat16 is fast only with AVX-512 BF16 or AMX). Use float32, or int8 "
            "(quantize='int8', "
            "--quantize int8), which is fast here."
        )
    if quantize == "int8":
        int8_route(features)


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype that `dtype` names: "bfloat16" and torch.bfloat16 alike (scripts pass names,
    PyTorch code passes dtypes)."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(
        f"dtype must be one of {', '.join(DTYPES)} (as a name or as torch."
        f"{'/torch.'.join(DTYPES)}), got {dtype!r}."
    )


class Int8Projection:
    """The forward of an `nn.Linear` whose weight is int8 (`weight_scale` per output row), mixed in
    before the module's own class by `quantize_int8` on CPUs with int8 dot products (the
    "int_mm" route):

        s_x = max|x_t| / r   (per token; r = 127, or 63 without VNNI)     x_q = round(x / s_x)
        y   = (x_q @ W_q^T) * s_W * s_x + b                     (int32 product, rescaled)
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        rows = input.reshape(-1, self.in_features)  # (N, in)
        return self.rows_product(rows).to(input.dtype).unflatten(0, input.shape[:-1])

    def rows_product(
        self,
        rows: torch.Tensor,
        sums: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """y above for `rows` (N, in): float32 (N, out). `sums` (int32) and `out` (float32), both
        (N, out), take the int32 product and y where given: a decoding loop's tensors, reused from
        step to step (`generation_translation.ReusedLogits`)."""
        scale = (
            rows.abs().amax(dim=1, keepdim=True).float().clamp_(min=SMALLEST_SCALE)
            / self.activation_range
        )  # (N, 1)
        quantized = (rows / scale).round_().to(torch.int8)  # (N, in)
        products = torch._int_mm(quantized, self.weight.t(), out=sums)  # (N, out), int32
        # Converted to float32 once, then scaled in place: int32 * float32 would convert the sums
        # into a new tensor of its own first (the same numbers).
        output = products.float() if out is None else out.copy_(products)
        return rescaled(output.mul_(self.weight_scale), scale, self.bias)


class FbgemmInt8Projection(Int8Projection):
    """The same W8A8 product through fbgemm's int8 linear (the "fbgemm" route, for CPUs without int8
    dot products). fbgemm takes one input scale per batch; to keep one per token (a sentence
    translates the same alone or in any batch) each row is scaled into [-1, 1], quantised by the
    fixed `UNIT_RANGE_QUANTIZATION` (7 bits: AVX2's multiply-add pairs cannot saturate int16), and
    the product scaled back:

        s_t = max|x_t|      y_t = fbgemm(x_t / s_t) * s_t + b
    """

    def rows_product(
        self,
        rows: torch.Tensor,
        sums: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """y above for `rows` (N, in): float32 (N, out), in a new tensor (fbgemm makes its own;
        `sums` and `out` are not used)."""
        rows = rows.float()
        scale = rows.abs().amax(dim=1, keepdim=True).clamp_(min=SMALLEST_SCALE)  # (N, 1)
        if torch.compiler.is_compiling():  # the custom operator costs ~35 us a call in eager mode
            output = fbgemm_unit_range_linear(
                rows / scale, self.packed_weight_key, self.out_features
            )
        else:
            output = fbgemm_product(rows / scale, self.packed_weight)  # (N, out), float32
        return rescaled(output, scale, self.bias)


@torch.library.custom_op(f"{OPERATOR_NAMESPACE}::fbgemm_unit_range_linear", mutates_args=())
def fbgemm_unit_range_linear(
    rows: torch.Tensor, packed_weight_key: int, out_features: int
) -> torch.Tensor:
    """fbgemm's product of `rows` (N, in), each in [-1, 1], with the packed weight registered under
    `packed_weight_key` (`register_packed_weights`): (N, out_features) float32, as
    `FbgemmInt8Projection` computes it in eager mode. An operator of its own so that torch.compile
    keeps the product whole."""
    packed_weight = PACKED_WEIGHTS.get(packed_weight_key)
    if packed_weight is None:
        raise RuntimeError(
            "An int8 projection's packed weight is not registered (the model was copied after "
            "quantisation?): call modeling_dwlstm.precision.register_packed_weights(model) before "
            "compiling it."
        )
    return fbgemm_product(rows, packed_weight)


def fbgemm_product(rows: torch.Tensor, packed_weight) -> torch.Tensor:
    """fbgemm's int8 product of `rows` in [-1, 1] (quantised by `UNIT_RANGE_QUANTIZATION`) with
    `packed_weight`."""
    return torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
        rows, *UNIT_RANGE_QUANTIZATION, packed_weight
    )


@fbgemm_unit_range_linear.register_fake
def _(rows: torch.Tensor, packed_weight_key: int, out_features: int) -> torch.Tensor:
    return rows.new_empty(rows.shape[0], out_features)


def register_packed_weights(model: nn.Module) -> None:
    """Register each fbgemm projection's packed weight for `fbgemm_unit_range_linear`, under its id:
    again after `copy.deepcopy` (which packs new weights) before torch.compile traces the copy."""
    for module in model.modules():
        if isinstance(module, FbgemmInt8Projection):
            module.packed_weight_key = id(module.packed_weight)
            PACKED_WEIGHTS[module.packed_weight_key] = module.packed_weight


def rescaled(output: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """output * scale + bias in one pass (`torch.addcmul`), in place in `output` unless the bias is
    being trained (autograd does not follow out=): the same numbers either way."""
    if bias is None:
        return output.mul_(scale)
    if bias.requires_grad and torch.is_grad_enabled():
        return torch.addcmul(bias, output, scale)
    return torch.addcmul(bias, output, scale, out=output)


# Up to this many rows (tokens x beams) the packed weight's product is used: on the AMX machine a
# base depth-wise LSTM's bfloat16 decode gained 1.07x (beam 4, 128 rows) and 1.11x (greedy, 32 and
# 256 rows) with it, and nothing at 1,024 rows (0.97-0.98x).
PACKED_PRODUCT_MAX_ROWS = 256


class PackedBfloat16Projection:
    """The forward of a bfloat16 `nn.Linear` on a CPU, mixed in before the module's own class by
    `pack_bfloat16_weights`: y = x W^T + b as nn.Linear computes it, with W held a second time in
    oneDNN's blocked layout, made at the module's first call, for inputs of up to
    `PACKED_PRODUCT_MAX_ROWS` rows (a decoding step's), where PyTorch's product reorders W at every
    call. The parameter stays the module's weight (saved, tied, and the one used with gradients,
    under torch.compile and for more rows); a weight changed afterwards (a new tensor, or
    `load_state_dict`) is packed again at the next call, one written through `.data` is not."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not takes_packed_product(self, input):
            return super().forward(input)
        return onednn_linear(input, packed_weight(self), self.bias)


def takes_packed_product(module: nn.Linear, input: torch.Tensor) -> bool:
    """Whether `module` (a `PackedBfloat16Projection`) computes `input` with its packed weight:
    bfloat16 input and weight, at most `PACKED_PRODUCT_MAX_ROWS` rows, no gradient for the weight,
    not being traced by torch.compile."""
    return not (
        torch.compiler.is_compiling()
        or input.dtype != torch.bfloat16
        or module.weight.dtype != torch.bfloat16
        or input.numel() > PACKED_PRODUCT_MAX_ROWS * module.in_features
        or (torch.is_grad_enabled() and module.weight.requires_grad)
    )


# module -> (which weight it was packed from, the packed weight): kept beside the module, not in
# it, because a packed tensor cannot be deep-copied (a copy packs its own)
PACKED_BFLOAT16_WEIGHTS = weakref.WeakKeyDictionary()


def weight_state(weight: torch.Tensor) -> tuple:
    """What changes when a weight does: its memory, and the version count that in-place writes
    through autograd's view raise (`load_state_dict`, `weight.copy_`); writes through `.data` do
    not raise it, and a tensor made under torch.inference_mode has none."""
    try:
        version = weight._version
    except (AttributeError, RuntimeError):
        version = None
    return weight.data_ptr(), version


def packed_weight(module: nn.Linear) -> torch.Tensor:
    """`module.weight` in oneDNN's blocked layout, packed at the first call and again after the
    weight changed (`weight_state`)."""
    packed_from, packed = PACKED_BFLOAT16_WEIGHTS.get(module, (None, None))
    state = weight_state(module.weight)
    if packed_from != state:
        packed = torch.ops.mkldnn._reorder_linear_weight(module.weight.detach(), None)
        PACKED_BFLOAT16_WEIGHTS[module] = (state, packed)
    return packed


def onednn_linear(
    input: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """F.linear with a packed weight: oneDNN's linear, as torch.compile's inductor calls it for
    frozen weights (a private operator of PyTorch, so `onednn_packing_works` checks it first)."""
    return torch.ops.mkldnn._linear_pointwise(input, packed, bias, "none", [], "")


@functools.cache
def onednn_packing_works() -> bool:
    """Whether this PyTorch packs bfloat16 weights for oneDNN and multiplies with them, giving
    F.linear's numbers (a small product compared); where not, one warning says that bfloat16
    projections stay unpacked."""
    try:
        generator = torch.Generator().manual_seed(0)
        input = torch.randn(3, 5, 64, generator=generator).to(torch.bfloat16)[:, ::2]
        weight = torch.randn(48, 64, generator=generator).to(torch.bfloat16)
        bias = torch.randn(48, generator=generator).to(torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        works = torch.allclose(
            onednn_linear(input, packed, bias).float(),
            nn.functional.linear(input, weight, bias).float(),
            rtol=1e-2,
            atol=1e-2,
        )
        reason = "its product differs from F.linear's"
    except (AttributeError, RuntimeError, NotImplementedError) as error:
        works, reason = False, f"{type(error).__name__}: {error}"
    if not works:
        warnings.warn(
            f"bfloat16 projections stay unpacked with torch {torch.__version__} ({reason}): "
            "decoding is correct, without the speed of oneDNN's packed weights.",
            stacklevel=2,
        )
    return works


def packs_bfloat16_weights(device: str = "cpu") -> bool:
    """Whether `prepare_for_inference` packs a bfloat16 model's weights on `device`: a CPU with
    native bfloat16 whose PyTorch packs them (`onednn_packing_works`)."""
    return device == "cpu" and cpu_features().native_bfloat16 and onednn_packing_works()


@functools.cache
def packed_class(linear_class: type) -> type:
    """`linear_class` with `PackedBfloat16Projection`'s forward (PackedLinear, PackedFusedLinear,
    PackedDepthWiseLstmGates, ...)."""
    return type(f"Packed{linear_class.__name__}", (PackedBfloat16Projection, linear_class), {})


def pack_bfloat16_weights(model: nn.Module) -> nn.Module:
    """Every `nn.Linear` of `model` (subclasses included) that computes as nn.Linear does, with a
    bfloat16 weight, made a `PackedBfloat16Projection`, in place (the packed weights are made at
    each one's first call)."""
    for module in linear_modules(model):
        if type(module).forward is nn.Linear.forward and module.weight.dtype == torch.bfloat16:
            module.__class__ = packed_class(type(module))
    return model


def has_packed_weights(model: nn.Module) -> bool:
    """Whether any projection of `model` is a `PackedBfloat16Projection`."""
    return any(isinstance(module, PackedBfloat16Projection) for module in model.modules())


@functools.cache
def int8_class(linear_class: type, route: str) -> type:
    """`linear_class` with the route's forward (Int8Linear, Int8FusedLinear,
    Int8DepthWiseLstmGates, ...)."""
    mixin = FbgemmInt8Projection if route == "fbgemm" else Int8Projection
    prefix = "FbgemmInt8" if route == "fbgemm" else "Int8"
    return type(f"{prefix}{linear_class.__name__}", (mixin, linear_class), {})


def quantize_int8(
    model: nn.Module, output_projection: bool = True, route: str | None = None
) -> nn.Module:
    """W8A8 dynamic quantisation of every `nn.Linear` of `model` (`lm_head` only when
    `output_projection`), in place, by `route` ("int_mm" or "fbgemm"; default: `int8_route()`, the
    fast one on this CPU)."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 quantisation is for CPU inference; on a GPU use dtype='bfloat16'.")
    route = route or int8_route()
    if route not in INT8_ROUTES:
        raise ValueError(f"route must be one of {', '.join(INT8_ROUTES)}, got {route!r}.")
    # u8 x s8 pair sums must not saturate int16 without VNNI
    activation_range = 127 if cpu_has_vnni() else 63
    for name, module in model.named_modules():  # each module once, shared ones included
        if isinstance(module, nn.Linear) and (output_projection or name != OUTPUT_PROJECTION):
            weight = module.weight.detach().float()  # (out, in)
            scale = weight.abs().amax(dim=1).clamp(min=SMALLEST_SCALE) / 127  # (out,)
            quantized = (weight / scale[:, None]).round().to(torch.int8)
            if route == "fbgemm":
                module.packed_weight = _fbgemm_pack(quantized, scale)
            # A new parameter: a tied output projection unties, the embedding keeps its float
            # weights.
            module.weight = nn.Parameter(quantized, requires_grad=False)
            module.register_buffer("weight_scale", scale, persistent=False)
            module.activation_range = activation_range
            module.__class__ = int8_class(type(module), route)
    model.int8_route = route
    register_packed_weights(model)
    return model


def _fbgemm_pack(quantized: torch.Tensor, scale: torch.Tensor):
    """fbgemm's packed weight (per-row scales, zero points 0), without the bias (added after the
    rescaling)."""
    # PyTorch marks its quantised tensor type deprecated; fbgemm's op still takes it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        weight = torch._make_per_channel_quantized_tensor(
            quantized, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0
        )
        return torch.ops.quantized.linear_prepack(weight, None)


def output_rows(linear: nn.Linear, rows: torch.Tensor) -> nn.Linear:
    """`linear` restricted to the output rows `rows` (indices), for a vocabulary shortlist: a new
    module of the same kind (float, or int8 by either route) whose output is `linear(x)[..., rows]`
    (exactly for int8, to rounding for float). Anything else (a LoRA wrapper, another library's
    quantised weight) is refused with a ValueError."""
    kind = type(linear)
    if kind not in {
        nn.Linear,
        packed_class(nn.Linear),
        *(int8_class(nn.Linear, route) for route in INT8_ROUTES),
    }:
        raise ValueError(
            "Only an nn.Linear (float or int8 from quantize_int8) can be restricted to output "
            f"rows, not {kind.__name__}."
        )
    rows = rows.to(linear.weight.device)
    restricted = kind.__new__(kind)
    nn.Module.__init__(restricted)
    restricted.in_features, restricted.out_features = linear.in_features, len(rows)
    # (rows, in)
    restricted.weight = nn.Parameter(linear.weight.detach()[rows], requires_grad=False)
    bias = (
        None
        if linear.bias is None
        else nn.Parameter(linear.bias.detach()[rows], requires_grad=False)
    )
    restricted.register_parameter("bias", bias)
    if isinstance(linear, Int8Projection):
        restricted.register_buffer("weight_scale", linear.weight_scale[rows], persistent=False)
        restricted.activation_range = linear.activation_range
    if isinstance(linear, FbgemmInt8Projection):
        restricted.packed_weight = _fbgemm_pack(restricted.weight, restricted.weight_scale)
        register_packed_weights(restricted)
    return restricted.eval()


def cpu_has_vnni() -> bool:
    """Whether this CPU has int8 dot-product instructions that the kernels use (`cpu_features`)."""
    return cpu_features().int8_dot_products


def linear_modules(model: nn.Module) -> list[nn.Linear]:
    """Every projection of `model`: its `nn.Linear` modules, subclasses included (each shared
    module once)."""
    return [module for module in model.modules() if isinstance(module, nn.Linear)]


def is_quantized(module: nn.Linear) -> bool:
    """Whether `module` computes in int8 (`quantize_int8`) or its weight is another library's
    quantised tensor (a weight split over processes by FSDP, a DTensor, holds floats)."""
    if isinstance(module, Int8Projection):
        return True
    return type(module.weight) not in (nn.Parameter, torch.Tensor) and not is_sharded(module.weight)


def has_quantized_projections(model: nn.Module) -> bool:
    """Whether any projection of `model` is quantised (`is_quantized`)."""
    return any(is_quantized(module) for module in linear_modules(model))


def is_sharded(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is a DTensor, i.e. split over processes (FSDP, tensor parallelism)."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


__all__ = [
    "AUTO",
    "CPU_CLASSES",
    "DTYPES",
    "INT8_ROUTES",
    "PRECISIONS",
    "QUANTIZATIONS",
    "CpuClass",
    "CpuFeatures",
    "FbgemmInt8Projection",
    "Int8Projection",
    "PACKED_PRODUCT_MAX_ROWS",
    "PackedBfloat16Projection",
    "cpu_class",
    "fastest_precision",
    "precision_name",
    "precision_settings",
    "check_precision",
    "cpu_features",
    "cpu_has_vnni",
    "cpuinfo",
    "int8_route",
    "prepare_for_inference",
    "quantize_int8",
    "linear_modules",
    "is_quantized",
    "output_rows",
    "torch_dtype",
    "has_quantized_projections",
    "has_packed_weights",
    "pack_bfloat16_weights",
    "packs_bfloat16_weights",
    "takes_packed_product",
]
