"""How much gradient reaches the bottom of a deep encoder during training.

Wang et al. (2019, §5.1) report that a 20-layer post-norm Transformer fails to train because "the
gradient norm in the low layers (e.g. embedding layer) approaches 0", and that DLCL fixes it.
`embedding_gradient_norms` trains a model for a few steps and records, after every backward pass,
the L2 norm of the loss gradient arriving at the encoder's embedding layer (w.r.t. its output, the
scaled token + position embeddings, so the tied output projection's share of the embedding matrix's
gradient does not hide it). `compare_embedding_gradient_norms` does that for several configs on the
same data.
"""

import torch
from transformers import AutoModelForSeq2SeqLM, PreTrainedTokenizerBase
from transformers.optimization import get_inverse_sqrt_schedule


def embedding_gradient_norms(
    model, batches: list[dict], learning_rate: float = 1e-3, warmup_steps: int = 100
) -> list[dict]:
    """Train `model` on `batches` (dicts with input_ids, attention_mask, labels), one Adam step
    (0.9, 0.98, 1e-9; inverse-square-root schedule, as in the papers) per batch, and return per step
    {"step", "loss", "embedding_gradient_norm"}."""
    if not batches:
        raise ValueError("embedding_gradient_norms needs at least one batch.")
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, betas=(0.9, 0.98), eps=1e-9)
    schedule = get_inverse_sqrt_schedule(optimizer, num_warmup_steps=warmup_steps)
    gradient_norms = []

    def record_gradient(module, inputs, output):
        output.register_hook(lambda gradient: gradient_norms.append(gradient.float().norm().item()))

    hook = model.get_encoder().embeddings.register_forward_hook(record_gradient)
    model.train()
    records = []
    try:
        for step, batch in enumerate(batches, start=1):
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            records.append(
                {"step": step, "loss": loss.item(), "embedding_gradient_norm": gradient_norms.pop()}
            )
    finally:
        hook.remove()
    return records


def translation_batches(
    tokenizer: PreTrainedTokenizerBase, pairs: list[tuple[str, str]], batch_size: int, steps: int
) -> list[dict]:
    """`steps` batches of `batch_size` consecutive (source, target) pairs, cycling through
    `pairs`."""
    if not pairs or batch_size < 1:
        raise ValueError(
            f"Need sentence pairs and batch_size >= 1, got {len(pairs)} pairs and batch_size="
            f"{batch_size}."
        )
    batches = []
    for step in range(steps):
        chunk = [pairs[(step * batch_size + i) % len(pairs)] for i in range(batch_size)]
        sources, targets = zip(*chunk)
        encoded = tokenizer(
            list(sources),
            text_target=list(targets),
            padding=True,
            truncation=True,
            max_length=128,
            return_tensors="pt",
        )
        batches.append({name: encoded[name] for name in ("input_ids", "attention_mask", "labels")})
    return batches


def compare_embedding_gradient_norms(
    configs: dict, batches: list[dict], seed: int = 0, **training
) -> dict[str, list[dict]]:
    """`embedding_gradient_norms` for each {name: config}, every model initialised from the
    same seed."""
    results = {}
    for name, config in configs.items():
        torch.manual_seed(seed)
        model = AutoModelForSeq2SeqLM.from_config(config)
        results[name] = embedding_gradient_norms(model, batches, **training)
    return results


__all__ = ["embedding_gradient_norms", "translation_batches", "compare_embedding_gradient_norms"]
