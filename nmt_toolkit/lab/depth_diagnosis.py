"""What reaches each layer of a deep model during its first updates: the diagnosis behind
RESULTS.md's depth section.

`trace_training(model, batches, ...)` trains `model` with the papers' optimiser (Adam 0.9 / 0.98 /
1e-9 under an inverse-square-root schedule) on `batches` and, at step 1 and every `every` updates,
records for every layer of both stacks, over the real (non-padding) positions of that step's batch:

- `output_rms` (and `cell_rms` for the depth-wise LSTM): the size of what the layer hands the
  next one;
- `output_gradient_norm`: the norm of the loss gradient arriving at the layer's output, i.e. how
  much training signal reaches that depth (Wang et al. 2019, §5.1 look at the embedding layer's);
- `parameter_gradient_norm`: the gradient norm of the layer's own parameters (a module shared across
  layers, such as the depth-wise LSTM's gates, is reported once per stack under
  `shared_gradient_norm`);
- depth-wise LSTM only: the mean `input`, `forget` and `output` gate of each step, and
  `embedding_share`, the mean over positions and features of the product of the forget gates from
  the bottom of the stack up to the layer: the factor by which the cell still holds the embedding
  c_0 (c_l = f_l * c_{l-1} + i_l * h_l), and `embedding_fraction`, the norm of that surviving part
  of c_0 over the norm of c_l.

`token_batches` builds the batches as training does: pairs packed by token count (at most
`max_tokens` padded tokens a side), the batch order shuffled by the seed.
"""

import math
from collections.abc import Sequence

import torch
from torch import nn
from transformers.optimization import get_inverse_sqrt_schedule

from modeling_dwlstm.modeling_dwlstm import DepthWiseLstmGates

from ..batching import TokenBatchSampler
from .analysis import GATE_NAMES, STACKS, real_positions, stack_layers


def gate_modules(model) -> list[nn.Module]:
    """Every depth-wise LSTM gate projection of `model`, each once (shared ones included)."""
    return list(
        {
            id(module): module
            for module in model.modules()
            if isinstance(module, DepthWiseLstmGates)
        }.values()
    )


class LayerProbe:
    """Forward hooks on every layer (and gate projection) of a model that record one step's
    statistics."""

    def __init__(self, model):
        self.model, self.masks, self.rows, self.handles = model, {}, {}, []
        self.gates = gate_modules(model)
        for stack in STACKS:
            for index, layer in enumerate(stack_layers(model, stack)):
                self.handles.append(layer.register_forward_pre_hook(self._entering(stack, index)))
                self.handles.append(layer.register_forward_hook(self._leaving(stack, index)))
        for gates in self.gates:
            self.handles.append(gates.register_forward_hook(self._gating))
        self.current = None

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def start(self, batch: dict):
        """Record the next forward and backward pass (over `batch`'s real positions)."""
        self.masks = real_positions(batch, self.model.config.pad_token_id)
        self.rows = {stack: [dict() for _ in stack_layers(self.model, stack)] for stack in STACKS}
        self.embeddings, self.forget_product = {}, {}

    def _real(self, stack: str, tensor: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (N, d)
        return tensor.detach()[self.masks[stack].to(tensor.device)].float()

    def _entering(self, stack: str, index: int):
        def hook(module, args):
            if not self.rows:
                return
            self.current = (stack, index)
            # the cell entering the stack: c_0
            if index == 0 and len(args) > 1 and args[1] is not None:
                self.embeddings[stack] = self._real(stack, args[1])

        return hook

    def _leaving(self, stack: str, index: int):
        def hook(module, args, layer_output):
            if not self.rows:
                return
            row = self.rows[stack][index]
            output, cell = layer_output.output, layer_output.cell
            row["output_rms"] = self._real(stack, output).square().mean().sqrt().item()
            if cell is not None:
                row["cell_rms"] = self._real(stack, cell).square().mean().sqrt().item()
                if stack in self.forget_product:
                    row["embedding_share"] = self.forget_product[stack].mean().item()
                # ||prod f * c_0|| / ||c_l||
                if stack in self.embeddings and stack in self.forget_product:
                    carried = self.forget_product[stack] * self.embeddings[stack]
                    row["embedding_fraction"] = (
                        carried.norm() / self._real(stack, cell).norm()
                    ).item()
            if output.requires_grad:
                mask = self.masks[stack].to(output.device)
                output.register_hook(
                    lambda gradient: row.update(
                        output_gradient_norm=gradient[mask].float().norm().item()
                    )
                )

        return hook

    def _gating(self, module, args, projected):  # z = W c + b, (B, T, 3d)
        if not self.rows or self.current is None:
            return
        stack, index = self.current
        row = self.rows[stack][index]
        # i, f, g: (N, d)
        gates = [self._real(stack, gate) for gate in module.activations(projected.detach())]
        for name, gate in zip(GATE_NAMES, gates):
            # a two-LSTM decoder layer keeps its second step's
            row[name] = round(gate.mean().item(), 4)
        forget = gates[GATE_NAMES.index("forget")]
        self.forget_product[stack] = forget * self.forget_product.get(stack, 1.0)

    def finish(self) -> dict:
        """The recorded rows, with each layer's own parameter gradient norm (the backward pass
        has run)."""
        shared = {id(parameter) for gates in self.gates for parameter in gates.parameters()}
        for stack in STACKS:
            for row, layer in zip(self.rows[stack], stack_layers(self.model, stack)):
                row["parameter_gradient_norm"] = _norm(
                    p for p in layer.parameters() if id(p) not in shared
                )
        rows, self.rows = self.rows, {}
        return rows


def _norm(parameters) -> float:
    return math.sqrt(
        sum(float(p.grad.float().square().sum()) for p in parameters if p.grad is not None)
    )


def token_batches(
    tokenizer,
    pairs: Sequence[tuple[str, str]],
    max_tokens: int,
    steps: int,
    seed: int = 0,
    max_length: int = 256,
) -> list[dict]:
    """`steps` padded batches (input_ids, attention_mask, labels with -100 on padding) of `pairs`,
    packed by token count like training's `TokenBatchSampler`, cycling through the shuffled batches
    as epochs would."""
    sources = tokenizer([source for source, _ in pairs], truncation=True, max_length=max_length)[
        "input_ids"
    ]
    targets = tokenizer(
        text_target=[target for _, target in pairs], truncation=True, max_length=max_length
    )["input_ids"]
    sampler = TokenBatchSampler(
        [len(s) for s in sources], [len(t) for t in targets], max_tokens, seed=seed
    )
    batches, epoch = [], 0
    while len(batches) < steps:
        sampler.set_epoch(epoch)
        for indices in sampler:
            source = tokenizer.pad(
                {"input_ids": [sources[i] for i in indices]}, return_tensors="pt"
            )
            labels = tokenizer.pad(
                {"input_ids": [targets[i] for i in indices]}, return_tensors="pt"
            )
            batches.append(
                {
                    "input_ids": source["input_ids"],
                    "attention_mask": source["attention_mask"],
                    "labels": labels["input_ids"].masked_fill(labels["attention_mask"] == 0, -100),
                }
            )
        epoch += 1
    return batches[:steps]


def trace_training(
    model,
    batches: Sequence[dict],
    learning_rate: float = 1e-3,
    warmup_steps: int = 200,
    every: int = 25,
) -> list[dict]:
    """Train `model` one Adam step per batch and return a record at step 1 and every `every` steps:
    {"step", "loss", "learning_rate", "encoder": [row per layer], "decoder": [...],
    "shared_gradient_norm"} (rows as in the module docstring). Batches are dicts with input_ids,
    attention_mask and labels."""
    if not batches:
        raise ValueError("trace_training needs at least one batch.")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"`every` must be a positive integer, got {every!r}.")
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, betas=(0.9, 0.98), eps=1e-9)
    schedule = get_inverse_sqrt_schedule(optimizer, num_warmup_steps=warmup_steps)
    probe, records = LayerProbe(model), []
    model.train()
    try:
        for step, batch in enumerate(batches, start=1):
            batch = {name: tensor.to(model.device) for name, tensor in batch.items()}
            traced = step == 1 or step % every == 0
            if traced:
                probe.start(batch)
            loss = model(**batch).loss
            loss.backward()
            if traced:
                rows = probe.finish()
                stacks = {
                    stack: [gates for gates in probe.gates if _in_stack(model, stack, gates)]
                    for stack in STACKS
                }
                records.append(
                    {
                        "step": step,
                        "loss": loss.item(),
                        "learning_rate": schedule.get_last_lr()[0],
                        **rows,
                        "shared_gradient_norm": {
                            stack: _norm(p for gates in modules for p in gates.parameters())
                            for stack, modules in stacks.items()
                            if modules
                        },
                    }
                )
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
    finally:
        probe.remove()
    return records


def _in_stack(model, stack: str, module: nn.Module) -> bool:
    return any(
        candidate is module
        for layer in stack_layers(model, stack)
        for candidate in _gates_of(layer)
    )


def _gates_of(layer: nn.Module):
    for step in layer.modules():
        gates = getattr(step, "gates", None)
        if isinstance(gates, DepthWiseLstmGates):
            yield gates


__all__ = ["LayerProbe", "gate_modules", "token_batches", "trace_training"]
