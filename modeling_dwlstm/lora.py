"""LoRA (PEFT) on this family: the names `target_modules` takes, and the check that an adapter
reaches the attention.

`target_modules="all-linear"` adapts every projection but the output one. By name, every member has
the attention projections `ATTENTION_PROJECTIONS` (self-attention's fused `qkv_proj`,
cross-attention's `q_proj` and fused `kv_proj`, and `out_proj`) plus its own
(`FamilyMember.projections`). LoRA recipes written for unfused models name q_proj / k_proj / v_proj,
of which only the cross-attention query exists here: an adapter that names modules the model lacks,
or reaches fewer than half of the attention inputs, is reported when PEFT attaches it
(`LoraReachCheck`).
"""

from torch import nn
from transformers.utils import logging

logger = logging.get_logger(__name__)

# The attention projections by the names PEFT's `target_modules` matches. Self-attention computes
# queries, keys and values with one matmul (`qkv_proj`), cross-attention keys and values
# (`kv_proj`).
ATTENTION_PROJECTIONS = ("qkv_proj", "q_proj", "kv_proj", "out_proj")
ATTENTION_INPUTS = ("qkv_proj", "q_proj", "kv_proj")


def attention_inputs_reached(model: nn.Module) -> tuple[int, int]:
    """(adapted, all) query, key and value projections of `model`'s attentions (the modules with a
    child of an `ATTENTION_INPUTS` name); a fused projection counts once per block, and a projection
    is adapted when PEFT wrapped it (its `base_layer` is the original)."""
    reached = total = 0
    for attention in model.modules():
        for name in ATTENTION_INPUTS:
            projection = attention._modules.get(name)
            if projection is not None:
                base = getattr(projection, "base_layer", projection)
                blocks = getattr(base, "blocks", 1)
                total += blocks
                reached += blocks if projection is not base else 0
    return reached, total


def unmatched_target_modules(model: nn.Module, adapter_config) -> list[str]:
    """The names in an adapter config's `target_modules` list that match no module of `model` (PEFT
    only refuses a list of which none matches). A regular expression or "all-linear" is not a list:
    nothing to report."""
    targets = getattr(adapter_config, "target_modules", None)
    if not isinstance(targets, (list, tuple, set, frozenset)):
        return []
    names = [name for name, _ in model.named_modules()]
    return sorted(
        target
        for target in targets
        if not any(name == target or name.endswith(f".{target}") for name in names)
    )


def projection_names(model: nn.Module, adapters=()) -> set[str]:
    """The names `target_modules` matches of `model`'s projections (`nn.Linear` modules), whether or
    not PEFT wrapped them (the original is then the wrapper's `base_layer`); the adapters' own
    (`lora_A.<adapter>`) left out."""
    names = set()
    for name, module in model.named_modules():
        parts = name.split(".")
        if isinstance(module, nn.Linear) and not set(parts) & set(adapters):
            names.add(parts[-2] if parts[-1] == "base_layer" else parts[-1])
    return names


def check_lora_reach(model: nn.Module, adapter_configs: dict) -> None:
    """Warn when an adapter names modules this model lacks, or reaches some but fewer than half of
    its attention inputs: `target_modules=["q_proj", "v_proj"]`, the usual recipe, adapts only the
    cross-attention queries here. Adapters that reach no attention at all (the FFNs only, say) are
    taken as meant."""
    adapter_configs = adapter_configs or {}
    reached, total = attention_inputs_reached(model)
    others = sorted(projection_names(model, adapter_configs) - {*ATTENTION_PROJECTIONS, "lm_head"})
    for adapter, adapter_config in adapter_configs.items():
        unmatched = unmatched_target_modules(model, adapter_config)
        if unmatched or 0 < reached < total / 2:
            logger.warning(lora_reach_message(adapter, unmatched, reached, total, others))


def lora_reach_message(
    adapter: str, unmatched: list[str], reached: int, total: int, others: list[str]
) -> str:
    """What `check_lora_reach` says: what the adapter missed, why, and the `target_modules` that
    reach it."""
    missed = f"target_modules {unmatched} match no module of this model; " if unmatched else ""
    return (
        f"Adapter {adapter!r}: {missed}it reaches {reached} of the {total} query/key/value "
        "projections of the "
        "attentions. This model fuses self-attention's queries, keys and values into `qkv_proj` "
        "and "
        "cross-attention's keys and values into `kv_proj` (`q_proj` is cross-attention's query). "
        "For every attention "
        f"projection use target_modules={list(ATTENTION_PROJECTIONS)}; for every projection "
        f'target_modules="all-linear" (the others here: {others}).'
    )


class LoraReachCheck:
    """Mixed into the models: PEFT (`get_peft_model`, `PeftModel.from_pretrained`) and transformers'
    `add_adapter` set `peft_config` once the adapters are in place, which is when
    `check_lora_reach` looks."""

    @property
    def peft_config(self) -> dict:
        """The adapters' configurations, by adapter name."""
        if "_peft_config" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__} has no adapters (no `peft_config`).")
        return self.__dict__["_peft_config"]

    @peft_config.setter
    def peft_config(self, adapter_configs: dict):
        self.__dict__["_peft_config"] = adapter_configs
        check_lora_reach(self, adapter_configs)

    @peft_config.deleter
    def peft_config(self):
        self.__dict__.pop("_peft_config", None)


__all__ = [
    "ATTENTION_PROJECTIONS",
    "LoraReachCheck",
    "attention_inputs_reached",
    "check_lora_reach",
    "projection_names",
]
