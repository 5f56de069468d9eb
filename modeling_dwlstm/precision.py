"""Low precision for inference: bfloat16 weights and int8 dynamic quantisation of every projection.

`prepare_for_inference(model, dtype="bfloat16", quantize="int8")` changes a loaded translation model in
place and returns it: still a normal `PreTrainedModel`, so `generate()`, `translate_sentences`,
`scripts/evaluate_translation.py --dtype bfloat16 --quantize int8` and the translation pipeline take it:

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
    import modeling_dwlstm
    from modeling_dwlstm.precision import prepare_for_inference

    model = prepare_for_inference(AutoModelForSeq2SeqLM.from_pretrained("my-model"), "bfloat16", "int8")
    translator = pipeline("translation_en_to_de", model=model, tokenizer=AutoTokenizer.from_pretrained("my-model"))

(bfloat16 alone needs nothing of this module: `pipeline("translation_en_to_de", model="my-model",
trust_remote_code=True, dtype=torch.bfloat16)` loads the weights in bfloat16.)

What each option does, and why this route:

- dtype "bfloat16": every parameter and buffer cast to bfloat16 (weights, not `torch.autocast`: in issue
  14's measurements casting the weights was the faster of the two for every model, e.g. the residual
  pre-norm model at beam 4 1.61x against 1.21x Marian's float32 speed, and it halves the memory).
  LayerNorm, softmax and attention then run in bfloat16 too; `generate()` scores beams on float32
  copies of the logits. It works on every CPU, but only one with native bfloat16 (avx512_bf16, AMX)
  gains speed; elsewhere it can be slower than float32.
- quantize "int8": torchao's `Int8DynamicActivationInt8WeightConfig` on every `nn.Linear` (subclasses
  included: the fused attention projections, the depth-wise LSTM gates and the output projection).
  Weights are int8 per output row (symmetric), activations int8 per token, their scales computed at
  each call (dynamic), the products accumulated in int32 and rescaled (W8A8). Why torchao:
  `torch.ao.quantization.quantize_dynamic` is deprecated in favour of torchao (it says so when called),
  and it looks module types up exactly (`type(module) in {nn.Linear}`), so it skips `nn.Linear`
  subclasses: our `FusedLinear` attention projections (18 of 67 projections of the base residual
  model) and `DepthwiseLstmGates` stay float32 under it. torchao's `quantize_` selects by `isinstance`,
  swaps the weight for a quantised tensor inside the same module (so a module shared between layers, and
  the forward around it, stay as they are), and is what transformers' own `TorchAoConfig` uses. Per-row
  weights and per-token activations also lose less than `quantize_dynamic`'s per-tensor scales: on the
  Multi30k model below `quantize_dynamic` reached 25 of its 36 projections and moved the logits by 2.9% of
  their range (teacher-forced argmax agreement 97.3%), torchao all 36 by 1.3% (99.0%). On a
  CPU without VNNI the ranges are reduced to 7 bits (torchao's `should_reduce_range`) to avoid overflow.
  Speed: in eager PyTorch on this project's CPU, torchao's int8 decodes *slower* than float32 (0.61-0.99x;
  `quantize_dynamic`'s fbgemm kernels were the fastest int8, 2.3x float32 greedy, but see above), while
  bfloat16 weights gain 1.4-1.8x (README, issue 14's benchmark): int8 here saves memory, bfloat16 buys speed.
- The output projection (`lm_head`, tied to the token embedding) is quantised too unless
  `quantize_output_projection=False`: it is about a third of a decode step at a 32k vocabulary. The
  quantised weight replaces `lm_head.weight`, which unties it: the embedding keeps its float weights.
  Measured on a Multi30k en-de depth-wise LSTM (d 256, 3+3 layers, 300 updates; the first 200
  test_2016_flickr sentences; sacreBLEU greedy / beam 4): float32 15.77 / 16.17, bfloat16 16.19 / 16.25,
  int8 without the output projection 15.75 / 16.34, int8 with it 15.69 / 16.46, bfloat16 + int8
  16.05 / 16.54; teacher-forced argmax agreement with float32 99.8% (bfloat16), 99.4% and 99.0% (int8
  without / with the output projection). Quantising it costs nothing measurable, so it is the default.

A prepared model is for inference: int8 weights take no gradient, and it is not meant to be saved
(keep the float32 checkpoint and prepare it after loading). Preparing a model twice is refused.
"""

import torch
from torch import nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
QUANTIZATIONS = ("none", "int8")
OUTPUT_PROJECTION = "lm_head"
INSTALL_TORCHAO = "pip install 'modeling-dwlstm[quantize]' (or: pip install torchao)"


def prepare_for_inference(model: nn.Module, dtype: str = "float32", quantize: str = "none",
                          quantize_output_projection: bool = True) -> nn.Module:
    """Cast `model` to `dtype` ("float32" or "bfloat16") and, with quantize="int8", quantise every
    `nn.Linear` to int8 (W8A8, dynamic; the output projection too unless `quantize_output_projection`
    is False). Changes `model` in place, puts it in eval mode and returns it."""
    check_precision(dtype, quantize)
    if any(is_quantized(module) for module in linear_modules(model)):
        raise ValueError("The model is already quantised: prepare a freshly loaded model (float32 or bfloat16).")
    model.eval()
    model.to(DTYPES[dtype])
    if quantize == "int8":
        quantize_int8(model, quantize_output_projection)
    return model


def check_precision(dtype: str, quantize: str) -> None:
    """A one-line ValueError for an unknown dtype or quantisation, or for int8 without torchao installed."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}.")
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZATIONS)}, got {quantize!r}.")
    if quantize == "int8":
        _torchao()


def quantize_int8(model: nn.Module, output_projection: bool = True) -> nn.Module:
    """torchao int8 dynamic-activation / int8-weight quantisation of every `nn.Linear` of `model` (and of
    `lm_head` only when `output_projection`), in place; see the module docstring."""
    quantize_, Int8DynamicActivationInt8WeightConfig, should_reduce_range = _torchao()
    device = next(model.parameters()).device
    config = Int8DynamicActivationInt8WeightConfig(
        reduce_range=should_reduce_range(device),  # 7-bit ranges where the CPU has no VNNI (overflow otherwise)
        set_inductor_config=False,  # a library call should not change global torch.compile settings
    )

    def selected(module: nn.Module, name: str) -> bool:
        return isinstance(module, nn.Linear) and (output_projection or name != OUTPUT_PROJECTION)

    quantize_(model, config, filter_fn=selected)
    return model


def linear_modules(model: nn.Module) -> list[nn.Linear]:
    """Every projection of `model`: its `nn.Linear` modules, subclasses included (each shared module once)."""
    return [module for module in model.modules() if isinstance(module, nn.Linear)]


def is_quantized(module: nn.Linear) -> bool:
    """Whether the weight of `module` is a quantised tensor (torchao's int8 tensors)."""
    return type(module.weight) not in (nn.Parameter, torch.Tensor)


def _torchao():
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
        from torchao.utils import should_reduce_range
    except ImportError as error:
        raise ValueError(f"int8 quantisation needs torchao: {INSTALL_TORCHAO}.") from error
    return quantize_, Int8DynamicActivationInt8WeightConfig, should_reduce_range


__all__ = ["DTYPES", "QUANTIZATIONS", "check_precision", "prepare_for_inference", "quantize_int8", "linear_modules", "is_quantized"]
