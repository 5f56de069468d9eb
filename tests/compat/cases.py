"""The compatibility suite's cases: tiny seeded models of every family member, the inputs they
decode and train on, and the reference outputs (`reference.json`) that the main environment's
transformers' own decoding loop gave.

This file imports only torch, transformers and modeling_dwlstm, so that it runs under every
transformers version of the matrix (`make test-compat`); `make_reference.py` writes `reference.json`
from it."""

import json
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, GenerationMixin, Trainer, TrainingArguments

import modeling_dwlstm

REFERENCE = Path(__file__).with_name("reference.json")
TINY = dict(
    vocab_size=40,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    ffn_dim=24,
    max_position_embeddings=64,
    dropout=0.0,
)
# Both searches run on the same two sources of different lengths (padding on the second).
SEARCHES = {
    "greedy": dict(num_beams=1, do_sample=False),
    "beam4": dict(num_beams=4, do_sample=False),
    # the options a beam search of our own must reproduce
    "beam4_options": dict(
        num_beams=4,
        do_sample=False,
        num_return_sequences=2,
        length_penalty=0.6,
        min_new_tokens=2,
        early_stopping=True,
    ),
}
EOS_SCALE = 4.0
MAX_NEW_TOKENS = 8
TRAINER_STEPS = 4
TRAINER_MEMBER = "dwlstm"


def members() -> dict:
    """{model_type: config class} of every family member."""
    return {
        member.config_class.model_type: member.config_class for member in modeling_dwlstm.MEMBERS
    }


def tiny_model(model_type: str, seed: int = 0, peaked: bool = True):
    """A tiny untrained model of `model_type`. `peaked`: its weights are scaled up so that its
    distributions are peaked enough for ties between scores to be unlikely (equal tokens then mean
    equal decoding, not luck); for training, not (its steps would be large enough to turn rounding
    differences between torch builds into different losses)."""
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(members()[model_type](**TINY)).eval()
    if not peaked:
        return model
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.mul_(3.0)
        # a longer </s> row of the (tied) output projection: some hypotheses end early, some late
        model.get_output_embeddings().weight[model.config.eos_token_id].mul_(EOS_SCALE)
    return model


def source_batch() -> dict:
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(4, TINY["vocab_size"], (2, 7), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, 5:], attention_mask[1, 5:] = 1, 0  # pad_token_id 1
    # </s> ends the first source
    input_ids[:, -1:] = torch.where(attention_mask[:, -1:].bool(), 2, 1)
    input_ids[1, 4] = 2
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def generate(model, search: str, transformers_loop: bool = False) -> list[list[int]]:
    """The tokens `generate()` gives for `source_batch()`; with `transformers_loop`, from
    transformers' own loop (`GenerationMixin.generate` and none of the family's decoding
    options)."""
    settings = dict(SEARCHES[search], max_new_tokens=MAX_NEW_TOKENS)
    with torch.no_grad():
        if transformers_loop:
            # the family's own loop, where it has one: off
            if hasattr(model.generation_config, "lean_decoding"):
                settings["lean_decoding"] = False
            output = GenerationMixin.generate(model, **source_batch(), **settings)
        else:
            output = model.generate(**source_batch(), **settings)
    return output.tolist()


def training_pairs() -> list[dict]:
    generator = torch.Generator().manual_seed(2)
    pairs = []
    for _ in range(8):
        source = torch.randint(4, TINY["vocab_size"], (6,), generator=generator).tolist() + [2]
        target = torch.randint(4, TINY["vocab_size"], (5,), generator=generator).tolist() + [2]
        pairs.append({"input_ids": source, "attention_mask": [1] * len(source), "labels": target})
    return pairs


def trainer_losses(output_dir: str) -> list[float]:
    """The training losses of `TRAINER_STEPS` steps of transformers' `Trainer` (batches of 2, AdamW,
    constant learning rate) on `training_pairs()`."""
    model = tiny_model(TRAINER_MEMBER, peaked=False).train()
    arguments = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=2,
        max_steps=TRAINER_STEPS,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        optim="adamw_torch",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        data_seed=0,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=training_pairs())
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def reference_outputs(output_dir: str) -> dict:
    """Everything `reference.json` holds, computed in this environment."""
    tokens = {
        model_type: {
            search: generate(tiny_model(model_type), search, transformers_loop=True)
            for search in SEARCHES
        }
        for model_type in members()
    }
    return {"tokens": tokens, "trainer_losses": trainer_losses(output_dir)}


def load_reference() -> dict:
    return json.loads(REFERENCE.read_text())
