"""Fully sharded data parallel training (PyTorch's FSDP2, `torch.distributed.fsdp.fully_shard`) of
this family's models, one FSDP unit per layer.

Some modules are used by several layers: the depth-wise LSTM's gate projection (one per stack by
default, `share_gates="per_stack"`, Xu et al. 2024) and, with `share_hidden`, its hidden module.
Such a module is registered by the first layer that uses it (its state-dict key names that layer)
and the later layers hold a plain reference. Sharded layer by layer, the first layer's unit would
free the shared weights after its own forward, and the later layers would then compute with sharded
weights (`aten.addmm got mixed torch.Tensor and DTensor`). So the unit that holds a shared module
(the *lender*) keeps its parameters gathered from its forward until its backward
(`reshard_after_forward=False`): the later layers run forward after it and backward before it, so
they always find the gathered weights, and their gradients are summed into the lender's before it
reduce-scatters them once. State-dict keys and numerics are those of the unsharded model; the cost
is one layer's parameters kept whole per stack during a step. (A shared module cannot be a unit of
its own: each call would reshard it, and the gates' LayerNorm weights are read outside their
forward, by the step's `activations`.)

- `shard_layers(model)`: `fully_shard` on every encoder and decoder layer, then on the whole model
  (the root unit: embeddings, final LayerNorms, output projection), with the lenders kept gathered
  and `generate()` registered as a forward of the root (it calls the encoder and decoder directly);
- `keep_lenders_gathered(model)`: the same fix for a model that something else sharded (accelerate's
  FSDP2 plugin wraps the classes in `model._no_split_modules`, the layers);
  `TokenBatchSeq2SeqTrainer` applies it (`ShardedLayersCallback`);
- `borrowed_modules(model)`: which modules are used by a module that does not own them.

Launching (torchrun or accelerate, the ready configs in `examples/accelerate/`) is described in
docs/training.md.
"""

import logging

import torch
from torch import nn
from transformers import TrainerCallback

logger = logging.getLogger(__name__)


def borrowed_modules(model: nn.Module) -> list[tuple[str, str]]:
    """(user's name, borrowed module's name) for every module that a module uses without owning it:
    held as a plain attribute (`attach_shared`) or named by its `used_modules()` while registered
    elsewhere in `model`."""
    names = {module: name for name, module in model.named_modules(remove_duplicate=False)}
    found = []
    for user_name, user in model.named_modules():
        references = {
            key: value for key, value in vars(user).items() if isinstance(value, nn.Module)
        }
        references.update(user.used_modules() if hasattr(user, "used_modules") else {})
        own = set(user.modules())
        for reference in references.values():
            if reference not in own and reference in names:
                found.append((user_name, names[reference]))
    return found


def fsdp_unit(model: nn.Module, name: str) -> tuple[str, nn.Module] | None:
    """(name, module) of the FSDP unit that manages the parameters of the module called `name`: the
    module itself or its nearest ancestor to which `fully_shard` was applied; None when nothing was
    sharded."""
    from torch.distributed.fsdp import FSDPModule

    parts = name.split(".") if name else []
    for end in range(len(parts), -1, -1):
        prefix = ".".join(parts[:end])
        module = model.get_submodule(prefix)
        if isinstance(module, FSDPModule):
            return prefix, module
    return None


def keep_lenders_gathered(model: nn.Module) -> list[str]:
    """After `fully_shard` was applied per layer (by `shard_layers`, accelerate or by hand): let
    every unit that holds a module other units use keep its parameters gathered between its forward
    and its backward. Returns the names of the units changed. Refuses a sharding under which a
    shared module would be used while sharded."""
    order = {name: index for index, (name, _) in enumerate(model.named_modules())}
    changed = []
    for user_name, lent_name in borrowed_modules(model):
        lender = fsdp_unit(model, lent_name)
        if lender is None:
            continue  # not sharded
        lender_name, lender_module = lender
        if lender_name == "" or user_name == lender_name or user_name.startswith(f"{lender_name}."):
            continue  # the lender's forward encloses the use (the root unit, for example)
        if lender_name == lent_name:
            # a unit of its own: calling it gathers it (the embedding in accelerate's unit of the
            # tied weights)
            continue
        if order[lender_name] > order[user_name]:
            raise ValueError(
                f"FSDP unit `{lender_name}` holds `{lent_name}`, which `{user_name}` uses before "
                "it runs: "
                "shard the layers with nmt_toolkit.sharding.shard_layers instead."
            )
        if lender_name not in changed:
            lender_module.set_reshard_after_forward(False, recurse=False)
            changed.append(lender_name)
    return changed


def transformer_layers(model: nn.Module) -> list[nn.Module]:
    """The encoder and decoder layers of one of this family's models, in forward order."""
    base = getattr(model, "base_model", model)
    stacks = [getattr(base, name, None) for name in ("encoder", "decoder")]
    if not all(stack is not None and hasattr(stack, "layers") for stack in stacks):
        raise ValueError(
            f"{type(model).__name__} is not one of this family's models (no encoder and decoder "
            "layers)."
        )
    return [layer for stack in stacks for layer in stack.layers]


def shard_layers(model: nn.Module, mesh=None, **fsdp_kwargs) -> nn.Module:
    """`fully_shard` every encoder and decoder layer of `model`, then `model` itself (embeddings,
    final LayerNorms and the tied output projection form the root unit), and keep the lenders of
    shared modules gathered (see the module's docstring). `mesh` (default: every process of the
    default process group, on the accelerator or the CPU) and `fsdp_kwargs` (`mp_policy`,
    `reshard_after_forward`, ...) go to every `fully_shard` call. Call it after
    `torch.distributed.init_process_group`, and create the optimizer before any forward: after one,
    the units that stay gathered (the root, the lenders) hold unsharded parameters until their
    backward. Returns `model`, sharded in place (`generate()` works on it)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    if not torch.distributed.is_initialized():
        raise ValueError(
            "shard_layers needs torch.distributed initialised: launch with torchrun or "
            "accelerate launch."
        )
    if mesh is None:
        device_type = (
            torch.accelerator.current_accelerator().type
            if torch.accelerator.is_available()
            else "cpu"
        )
        mesh = init_device_mesh(device_type, (torch.distributed.get_world_size(),))
    for layer in transformer_layers(model):
        fully_shard(layer, mesh=mesh, **fsdp_kwargs)
    fully_shard(model, mesh=mesh, **fsdp_kwargs)
    keep_lenders_gathered(model)
    # generate() calls the encoder and decoder directly, not the root's forward
    if hasattr(model, "generate"):
        register_fsdp_forward_method(model, "generate")
    return model


class ShardedLayersCallback(TrainerCallback):
    """Applies `keep_lenders_gathered` once the Trainer has prepared the model: under accelerate's
    FSDP2 plugin the model is sharded then, one unit per class in `_no_split_modules` (the
    layers)."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from torch.distributed.fsdp import FSDPModule

        if isinstance(model, FSDPModule):
            changed = keep_lenders_gathered(model)
            if changed and state.is_world_process_zero:
                logger.info(
                    "FSDP: the units holding modules shared by several layers keep them gathered "
                    "from forward to backward: %s.",
                    ", ".join(changed),
                )


__all__ = [
    "shard_layers",
    "keep_lenders_gathered",
    "borrowed_modules",
    "transformer_layers",
    "ShardedLayersCallback",
]
