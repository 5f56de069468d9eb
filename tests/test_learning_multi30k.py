"""Both members learn to translate real data: held-out loss on Multi30k en->de falls in a short
run."""

import pytest
import torch
from conftest import MULTI30K, read_multi30k
from transformers import AutoModelForSeq2SeqLM

from modeling_dwlstm import DwLstmConfig, ResidualTransformerConfig
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer

pytestmark = [
    pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k not found at {MULTI30K}"),
    # several threads on a busy 2-core machine are many times slower
    pytest.mark.usefixtures("one_thread"),
]


@pytest.fixture(scope="module")
def data():
    train = list(zip(read_multi30k("train", "en", 2000), read_multi30k("train", "de", 2000)))
    valid = list(zip(read_multi30k("val", "en", 200), read_multi30k("val", "de", 200)))
    tokenizer = train_joint_bpe_tokenizer(
        [text for pair in train for text in pair], vocab_size=1000
    )
    return tokenizer, train, valid


def encode(tokenizer, pairs):
    sources, targets = zip(*pairs)
    batch = tokenizer(list(sources), text_target=list(targets), padding=True, return_tensors="pt")
    return {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "labels": batch["labels"],
    }


@pytest.mark.parametrize(
    "config_class,options",
    [(DwLstmConfig, {}), (ResidualTransformerConfig, {"norm_position": "pre"})],
)
def test_validation_loss_falls(data, config_class, options):
    tokenizer, train, valid = data
    torch.manual_seed(0)
    config = config_class(
        **tokenizer_model_kwargs(tokenizer),
        d_model=64,
        ffn_dim=128,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        dropout=0.1,
        label_smoothing=0.0,
        **options,
    )
    model = AutoModelForSeq2SeqLM.from_config(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-9)
    validation = encode(tokenizer, valid)

    def validation_loss() -> float:
        model.eval()
        with torch.no_grad():
            return model(**validation).loss.item()

    before = validation_loss()
    model.train()
    for step in range(200):
        batch = encode(tokenizer, train[(step * 32) % len(train) :][:32])
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    after = validation_loss()
    print(f"{config.model_type}: validation loss {before:.2f} -> {after:.2f}")
    assert after < 0.65 * before, (before, after)
