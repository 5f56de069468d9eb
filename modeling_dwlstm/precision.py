"""Low precision for inference: bfloat16 weights and int8 dynamic quantisation of every projection.

`prepare_for_inference(model, quantize="int8")` changes a loaded translation model in
place and returns it: still a normal `PreTrainedModel`, so `generate()`, `translate_sentences`,
`scripts/evaluate_translation.py --dtype bfloat16 --quantize int8` and the translation pipeline take it:

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
    import modeling_dwlstm
    from modeling_dwlstm.precision import prepare_for_inference

    model = prepare_for_inference(AutoModelForSeq2SeqLM.from_pretrained("my-model"), quantize="int8")
    translator = pipeline("translation_en_to_de", model=model, tokenizer=AutoTokenizer.from_pretrained("my-model"))

(bfloat16 alone needs nothing of this module: `pipeline("translation_en_to_de", model="my-model",
trust_remote_code=True, dtype=torch.bfloat16)` loads the weights in bfloat16.)

What each option does:

- dtype "bfloat16" (or torch.bfloat16): every parameter and buffer cast to bfloat16 (casting the weights was faster than
  `torch.autocast` for every model we measured, and it halves the memory). LayerNorm, softmax and attention
  then run in bfloat16 too; `generate()` scores beams on float32 copies of the logits. Only CPUs with native
  bfloat16 (avx512_bf16, AMX) gain speed; elsewhere it can be slower than float32 (docs/speed.md).
- quantize "int8": every `nn.Linear` (subclasses included: the fused attention projections, the depth-wise
  LSTM gates and the output projection) computes in int8 (W8A8, dynamic): weights int8 per output row
  (symmetric), activations int8 per token with scales computed at each call, the product accumulated in
  int32 by `torch._int_mm` and rescaled. The module keeps its place and attributes (a module shared between
  layers, the gates' `activations`): only its class gains `Int8Projection`'s forward and its weight becomes
  int8. Why not a library: torchao's dynamic int8 config falls back, on a CPU, to an int32 or float32
  matmul, so no int8 kernel runs; `torch.ao.quantization.quantize_dynamic` is deprecated and skips every
  `nn.Linear` subclass. Standard tools still see every projection (torchao's `quantize_`, PEFT's LoRA).
  On a CPU without VNNI the activations use 7-bit ranges so that u8 x s8 pair sums cannot saturate int16.
  The int8 path is for CPUs; on a GPU use bfloat16.
- The output projection (`lm_head`, tied to the token embedding) is quantised too unless
  `quantize_output_projection=False`: it is about a third of a decode step at a 32k vocabulary, and
  quantising it cost no measurable BLEU. The quantised weight replaces `lm_head.weight`, which unties it:
  the embedding keeps its float weights.

The measurements behind these choices (speed and BLEU of each route) are in the repository's
experiments/benchmark/README.md.

A prepared model is for inference: int8 weights take no gradient, and it is not meant to be saved
(keep the float32 checkpoint and prepare it after loading). Preparing a model twice is refused.
"""

import functools
from pathlib import Path

import torch
from torch import nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
QUANTIZATIONS = ("none", "int8")
OUTPUT_PROJECTION = "lm_head"
SMALLEST_SCALE = 1e-12  # an all-zero row (a padded position) quantises to zeros instead of dividing by zero


def prepare_for_inference(model: nn.Module, dtype: str | torch.dtype = "float32", quantize: str = "none",
                          quantize_output_projection: bool = True) -> nn.Module:
    """Cast `model` to `dtype` ("float32" or "bfloat16", or the torch dtype: torch.bfloat16) and, with
    quantize="int8", quantise every `nn.Linear` to int8 (W8A8, dynamic; the output projection too unless
    `quantize_output_projection` is False). Changes `model` in place, puts it in eval mode and returns it."""
    check_precision(dtype, quantize)
    if any(is_quantized(module) for module in linear_modules(model)):
        raise ValueError("The model is already quantised: prepare a freshly loaded model (float32 or bfloat16).")
    model.eval()
    model.to(torch_dtype(dtype))
    if quantize == "int8":
        quantize_int8(model, quantize_output_projection)
    return model


def check_precision(dtype: str | torch.dtype, quantize: str) -> None:
    """A one-line ValueError for an unknown dtype or quantisation."""
    torch_dtype(dtype)
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZATIONS)}, got {quantize!r}.")


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype that `dtype` names: "bfloat16" and torch.bfloat16 alike (scripts pass names, PyTorch code
    passes dtypes)."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"dtype must be one of {', '.join(DTYPES)} (as a name or as torch.{'/torch.'.join(DTYPES)}), "
                     f"got {dtype!r}.")


class Int8Projection:
    """The forward of an `nn.Linear` whose weight is int8 (`weight_scale` per output row), mixed in before the
    module's own class by `quantize_int8`:

        s_x = max|x_t| / r   (per token, r = 127, or 63 without VNNI)     x_q = round(x / s_x)
        y   = (x_q @ W_q^T) * s_W * s_x + b                                 (int32 product, rescaled)
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        rows = input.reshape(-1, self.in_features)  # (N, in)
        scale = rows.abs().amax(dim=1, keepdim=True).float().clamp_(min=SMALLEST_SCALE) / self.activation_range  # (N, 1)
        quantized = (rows / scale).round_().to(torch.int8)  # (N, in)
        output = torch._int_mm(quantized, self.weight.t()).float().mul_(self.weight_scale).mul_(scale)  # (N, out)
        if self.bias is not None:
            output += self.bias
        return output.to(input.dtype).unflatten(0, input.shape[:-1])


@functools.cache
def int8_class(linear_class: type) -> type:
    """`linear_class` with `Int8Projection`'s forward (Int8Linear, Int8FusedLinear, Int8DepthwiseLstmGates)."""
    return type(f"Int8{linear_class.__name__}", (Int8Projection, linear_class), {})


def quantize_int8(model: nn.Module, output_projection: bool = True) -> nn.Module:
    """int8 dynamic-activation / int8-weight quantisation of every `nn.Linear` of `model` (and of `lm_head`
    only when `output_projection`), in place; see the module docstring."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 quantisation is for CPU inference (torch._int_mm); on a GPU use dtype='bfloat16'.")
    activation_range = 127 if cpu_has_vnni() else 63
    for name, module in model.named_modules():  # each module once, shared ones included
        if isinstance(module, nn.Linear) and (output_projection or name != OUTPUT_PROJECTION):
            weight = module.weight.detach().float()  # (out, in)
            scale = weight.abs().amax(dim=1).clamp(min=SMALLEST_SCALE) / 127  # (out,)
            # A new parameter: a tied output projection unties, the embedding keeps its float weights.
            module.weight = nn.Parameter((weight / scale[:, None]).round().to(torch.int8), requires_grad=False)
            module.register_buffer("weight_scale", scale, persistent=False)
            module.activation_range = activation_range
            module.__class__ = int8_class(type(module))
    return model


@functools.cache
def cpu_has_vnni() -> bool:
    """Whether this CPU has int8 dot-product instructions (VNNI or AMX), from Linux's /proc/cpuinfo; False when
    it cannot tell, which only costs the activations a bit of range."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text(encoding="utf-8").split())
    except OSError:
        return False
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})


def linear_modules(model: nn.Module) -> list[nn.Linear]:
    """Every projection of `model`: its `nn.Linear` modules, subclasses included (each shared module once)."""
    return [module for module in model.modules() if isinstance(module, nn.Linear)]


def is_quantized(module: nn.Linear) -> bool:
    """Whether `module` computes in int8 (`quantize_int8`) or its weight is another library's quantised tensor."""
    return isinstance(module, Int8Projection) or type(module.weight) not in (nn.Parameter, torch.Tensor)


__all__ = ["DTYPES", "QUANTIZATIONS", "Int8Projection", "check_precision", "cpu_has_vnni", "prepare_for_inference",
           "quantize_int8", "linear_modules", "is_quantized", "torch_dtype"]
