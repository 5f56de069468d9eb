"""Where the depth pair's decoding time goes (Xu et al. 2024, Table 6: the 12+12 depth-wise LSTM
against the 24+24 residual pre-norm model), and what one fused product for the depth-wise LSTM's
gates and hidden layer would gain. The benchmark's pair (`nmt_toolkit.lab.speed.DEPTH_PAIR`, random
weights, the papers' vocabulary), 32 sources of 20 tokens, 24 forced new tokens, beam 4, 2 threads.

1. The matmul weights one decoded token goes through (`decode_matmul_weights`): the speed ratio a
   decode bound by its products would show.
2. Wall time of the decoder's modules per decode (forward hooks, so slightly inflated), and of the
   self-attention cache's growth (`DynamicLayer.update`) and beam reordering (`reorder_cache`),
   timed around the calls (torch.profiler's self times of `cat` and `index_select` were 2-3x
   these).
3. "fused": the depth-wise LSTM's gate projection and its hidden layer's first projection, which
   read the same input, as one nn.Linear (a variant here, not in the library), interleaved with the
   two models as they are (`interleaved_times`); medians of REPEATS decodes.

    PYTHONPATH=. python experiments/speed/round-four/depth_pair_parts.py PRECISION REPEATS
"""

import collections
import statistics
import sys
import time
import types

import torch
import torch.nn.functional as F
import transformers.cache_utils
from torch import nn

import modeling_dwlstm.generation_translation as generation_translation
from modeling_dwlstm.modeling_dwlstm import DepthWiseLstm, LayerState
from nmt_toolkit.lab.speed import (
    DEPTH_PAIR,
    PAPER_VOCAB_SIZE,
    build_model,
    decode_matmul_weights,
    generate_forced,
    inference_copy,
    interleaved_times,
    random_batch,
)

torch.set_num_threads(2)
precision, repeats = sys.argv[1], int(sys.argv[2])
source = random_batch(32, 20, 1, PAPER_VOCAB_SIZE, seed=1)


def decode(model) -> torch.Tensor:
    return generate_forced(model, source, 4, 24, "cpu")


def fused_forward(self, x: torch.Tensor, state: LayerState) -> LayerState:
    concatenated = torch.cat([x, state.output], dim=-1)
    gates, hidden = self.fused(concatenated).split([self.gate_width, self.hidden_width], dim=-1)
    input_gate, forget_gate, output_gate = self.gate_activations(gates)
    inner = F.glu(self.hidden.norm(hidden), dim=-1)  # the GLU hidden layer of the base model
    cell = forget_gate * state.cell + input_gate * self.hidden.fc2(inner)
    return LayerState(output=output_gate * cell, cell=cell)


def fuse_gates_and_hidden(model: nn.Module) -> nn.Module:
    for step in model.modules():
        if isinstance(step, DepthWiseLstm):
            gates, first = step.gates, step.hidden.fc1
            fused = nn.Linear(
                gates.in_features, gates.out_features + first.out_features, dtype=gates.weight.dtype
            )
            with torch.no_grad():
                fused.weight.copy_(torch.cat([gates.weight, first.weight]))
                fused.bias.copy_(torch.cat([gates.bias, first.bias]))
            object.__setattr__(step, "fused", fused)  # not a submodule: the variant's own weights
            step.gate_width, step.hidden_width = gates.out_features, first.out_features
            step.forward = types.MethodType(fused_forward, step)
    return model


models, weights = {}, {}
for member, layers in DEPTH_PAIR.items():
    torch.manual_seed(0)
    model = build_model(member, "base", PAPER_VOCAB_SIZE, **layers).eval()
    weights[member] = decode_matmul_weights(model)
    models[member] = inference_copy(model, precision)
    if member == "dwlstm":
        models["dwlstm fused"] = fuse_gates_and_hidden(inference_copy(model, precision))
print(
    "decode matmul weights per token (M):",
    {member: round(count / 1e6, 1) for member, count in weights.items()},
    f"residual / dwlstm {weights['residual-prenorm'] / weights['dwlstm']:.3f}",
)

# 2. the decoder's parts
spent = collections.Counter()


def timed_calls(function, name):
    def timed_function(*args, **kwargs):
        start = time.perf_counter()
        result = function(*args, **kwargs)
        spent[name] += time.perf_counter() - start
        return result

    return timed_function


transformers.cache_utils.DynamicLayer.update = timed_calls(
    transformers.cache_utils.DynamicLayer.update, "cache growth (DynamicLayer.update)"
)
generation_translation.reorder_cache = timed_calls(
    generation_translation.reorder_cache, "beam reordering (reorder_cache)"
)


def start_clock(module, args):
    starts[module] = time.perf_counter()


def stop_clock(name):
    def hook(module, args, output):
        spent[name] += time.perf_counter() - starts[module]

    return hook


starts = {}
for member in DEPTH_PAIR:
    model, handles = models[member], []
    for path, module in model.model.decoder.named_modules():
        if path and path.count(".") <= 3:  # layers, their attention and steps, and the steps' parts
            kind = ".".join(part for part in path.split(".") if not part.isdigit())
            handles.append(module.register_forward_pre_hook(start_clock))
            handles.append(
                module.register_forward_hook(stop_clock(f"{type(module).__name__} {kind}"))
            )
    decode(model)
    spent.clear()
    start = time.perf_counter()
    decode(model)
    print(f"== {member} {precision}, one decode with hooks: {time.perf_counter() - start:.3f} s")
    for name, seconds in spent.most_common(14):
        print(f"  {name:60s} {seconds * 1e3:8.1f} ms")
    for handle in handles:
        handle.remove()

# 3. interleaved decodes, the fused variant's tokens first
plain, fused = decode(models["dwlstm"]), decode(models["dwlstm fused"])
print(f"fused variant: {(plain != fused).float().mean().item():.3f} of the tokens differ")
tasks = {name: lambda model=model: decode(model) for name, model in models.items()}
times = interleaved_times(tasks, repeats, "cpu")  # the order rotated each repeat
medians = {name: statistics.median(values) for name, values in times.items()}
print("medians:", {name: round(seconds, 3) for name, seconds in medians.items()})
print(
    f"residual / dwlstm time: {medians['residual-prenorm'] / medians['dwlstm']:.3f}; "
    f"with the fused variant {medians['residual-prenorm'] / medians['dwlstm fused']:.3f}"
)
