"""Every family member behaves like a built-in transformers seq2seq model."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import CASES, WITHOUT_PACKAGE, random_ids, tiny_model
from transformers import AutoModelForSeq2SeqLM

from modeling_dwlstm.modeling_translation import CACHE_FIELD


def assert_gradients_reach_every_parameter(model):
    model.train()
    labels = random_ids(2, 5, seed=2)
    model(input_ids=random_ids(2, 7), labels=labels).loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, f"{name} gets no gradient"
        assert parameter.grad.abs().sum() > 0, f"{name} gets a zero gradient"


def assert_cached_steps_equal_full_forward(model, steps: int = 6):
    input_ids, decoder_input_ids = random_ids(2, 7), random_ids(2, steps, seed=3)
    with torch.no_grad():
        full = model(
            input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False
        ).logits
        encoder_outputs = model.get_encoder()(input_ids=input_ids)
        cache, step_logits = None, []
        for t in range(steps):
            out = model(
                encoder_outputs=encoder_outputs,
                decoder_input_ids=decoder_input_ids[:, t : t + 1],
                use_cache=True,
                **{CACHE_FIELD: cache},
            )  # as generate() passes it
            cache = getattr(out, CACHE_FIELD)
            step_logits.append(out.logits)
    torch.testing.assert_close(torch.cat(step_logits, dim=1), full, rtol=1e-5, atol=1e-5)


def test_gradients_reach_every_parameter(case):
    model = tiny_model(case)
    # ReZero starts at a = 0, where nothing below the decoder's scalars gets a gradient
    # (test_rezero)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("residual_weight"):
                parameter.fill_(0.5)
    assert_gradients_reach_every_parameter(model)


def test_cached_decoding_equals_full_forward(case):
    assert_cached_steps_equal_full_forward(tiny_model(case))


def test_save_load_round_trip_is_strict_and_exact(case, tmp_path):
    model = tiny_model(case)
    input_ids, labels = random_ids(2, 7), random_ids(2, 5, seed=2)
    expected = model(input_ids=input_ids, labels=labels).logits
    model.save_pretrained(tmp_path)
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, output_loading_info=True)
    assert type(loaded) is type(model)
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    assert torch.equal(loaded.eval()(input_ids=input_ids, labels=labels).logits, expected)


def test_remote_code_loads_without_the_package(tmp_path):
    """Every member saved with auto_map loads with trust_remote_code in a process that cannot
    import us."""
    input_ids = random_ids(2, 7)
    for case in CASES:
        model = tiny_model(case)
        model.save_pretrained(tmp_path / case)
        with torch.no_grad():
            logits = model(input_ids=input_ids, decoder_input_ids=input_ids[:, :4]).logits
        torch.save({"input_ids": input_ids, "logits": logits}, tmp_path / case / "expected.pt")
        assert json.loads((tmp_path / case / "config.json").read_text())["auto_map"][
            "AutoModelForSeq2SeqLM"
        ]
    script = WITHOUT_PACKAGE + textwrap.dedent(
        """
        import sys, torch
        from transformers import AutoModelForSeq2SeqLM
        for case in sys.argv[1:]:
            model = AutoModelForSeq2SeqLM.from_pretrained(case, trust_remote_code=True).eval()
            assert model.__class__.__module__.startswith("transformers_modules"), model.__class__.__module__
            expected = torch.load(f"{case}/expected.pt")
            with torch.no_grad():
                logits = model(input_ids=expected["input_ids"], decoder_input_ids=expected["input_ids"][:, :4]).logits
            assert torch.equal(logits, expected["logits"]), case
            print("ok", case)
        """  # noqa: E501
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", script, *CASES],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("ok ") == len(CASES)


def test_beam_search_same_with_and_without_cache(case):
    model = tiny_model(case)
    input_ids = random_ids(3, 6)
    kwargs = dict(num_beams=4, max_length=10, do_sample=False)
    with_cache = model.generate(input_ids, use_cache=True, **kwargs)
    without_cache = model.generate(input_ids, use_cache=False, **kwargs)
    assert torch.equal(with_cache, without_cache)
    assert with_cache.shape[1] > 1


def test_greedy_and_sampling_generate(case):
    model = tiny_model(case)
    input_ids = random_ids(2, 6)
    greedy = model.generate(input_ids, num_beams=1, do_sample=False, max_length=8)
    assert torch.equal(
        greedy,
        model.generate(input_ids, num_beams=1, do_sample=False, max_length=8, use_cache=False),
    )
    torch.manual_seed(0)
    sampled = model.generate(input_ids, do_sample=True, num_beams=1, top_k=5, max_length=8)
    assert sampled.shape[0] == 2 and int(sampled.max()) < model.config.vocab_size


def test_padded_batch_equals_each_sentence_alone(case):
    model = tiny_model(case)
    pad = model.config.pad_token_id
    short, long = random_ids(1, 4, seed=5), random_ids(1, 7, seed=6)
    batch = torch.full((2, 7), pad)
    batch[0, :4], batch[1] = short[0], long[0]
    mask = (torch.arange(7)[None, :] < torch.tensor([[4], [7]])).long()
    decoder_input_ids = random_ids(2, 5, seed=7)
    with torch.no_grad():
        batched = model(
            input_ids=batch, attention_mask=mask, decoder_input_ids=decoder_input_ids
        ).logits
        for row, sentence in enumerate((short, long)):
            alone = model(
                input_ids=sentence, decoder_input_ids=decoder_input_ids[row : row + 1]
            ).logits
            torch.testing.assert_close(batched[row : row + 1], alone, rtol=1e-5, atol=1e-5)
    generated = model.generate(batch, attention_mask=mask, num_beams=4, max_length=9)
    for row, sentence in enumerate((short, long)):
        alone = model.generate(sentence, num_beams=4, max_length=9)[0]
        assert torch.equal(generated[row, : alone.shape[0]], alone)
        assert (generated[row, alone.shape[0] :] == pad).all()


def test_hidden_states_and_attentions(case):
    model = tiny_model(case)
    config = model.config
    out = model(
        input_ids=random_ids(2, 7),
        decoder_input_ids=random_ids(2, 5),
        output_hidden_states=True,
        output_attentions=True,
    )
    assert len(out.encoder_hidden_states) == config.encoder_layers + 1
    assert len(out.decoder_hidden_states) == config.decoder_layers + 1
    assert torch.equal(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    assert all(h.shape == (2, 7, config.d_model) for h in out.encoder_hidden_states)
    assert len(out.encoder_attentions) == config.encoder_layers
    assert out.cross_attentions[0].shape == (2, config.decoder_attention_heads, 5, 7)
    torch.testing.assert_close(
        out.cross_attentions[0].sum(-1), torch.ones(2, config.decoder_attention_heads, 5)
    )
    plain = model(input_ids=random_ids(2, 7), decoder_input_ids=random_ids(2, 5))
    # SDPA path == explicit weights path
    torch.testing.assert_close(plain.logits, out.logits, rtol=1e-5, atol=1e-5)


def test_loss_is_label_smoothed_cross_entropy_over_non_padding():
    model = tiny_model("dwlstm")
    labels = random_ids(2, 5, seed=2)
    labels[1, 3:] = model.config.pad_token_id
    out = model(input_ids=random_ids(2, 7), labels=labels)
    keep = labels != model.config.pad_token_id
    logits = out.logits[keep]
    expected = torch.nn.functional.cross_entropy(logits, labels[keep], label_smoothing=0.1)
    torch.testing.assert_close(out.loss, expected)


@pytest.mark.parametrize(
    "checkpointed_case",
    [
        "dwlstm-two-lstm",
        "highway-sdu-tanh-up-to-layer-1",
        "rnn-glu-shared-hidden-concat",
        "dlcl-pre-learned",
        "ta-post",
    ],
)
@pytest.mark.parametrize(
    "options",
    [{}, {"activation_checkpointing_kwargs": {"use_reentrant": True}}, {"every_n_layers": 2}],
)
def test_gradient_checkpointing_gives_the_same_gradients(checkpointed_case, options):
    """transformers' own mechanism (GradientCheckpointingLayer): its options reach our layers."""

    def gradients(model):
        model.train()
        model(input_ids=random_ids(2, 7), labels=random_ids(2, 5, seed=2)).loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    model = tiny_model(checkpointed_case)
    expected = gradients(model)
    model.zero_grad()
    model.activation_checkpointing_enable(**options)
    layers = [*model.model.encoder.layers, *model.model.decoder.layers]
    step = options.get("every_n_layers", 1)
    assert [layer.gradient_checkpointing for layer in layers] == [
        i % step == 0 for i in range(len(layers))
    ]
    for name, grad in gradients(model).items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_custom_checkpoint_function_is_used():
    model = tiny_model("dwlstm")
    calls = []

    def checkpoint(function, *args, **kwargs):
        calls.append(function)
        return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False, **kwargs)

    model.activation_checkpointing_enable()
    model.train()
    for module in model.modules():
        if hasattr(module, "_gradient_checkpointing_func"):
            module._gradient_checkpointing_func = checkpoint
    model(input_ids=random_ids(2, 7), labels=random_ids(2, 5, seed=2)).loss.backward()
    assert len(calls) == model.config.encoder_layers + model.config.decoder_layers


def test_resized_embeddings_are_used_by_both_stacks():
    model = tiny_model("dwlstm")
    model.resize_token_embeddings(48)
    assert model.model.encoder.embeddings.token_embedding is model.get_input_embeddings()
    assert model.lm_head.weight is model.get_input_embeddings().weight
    out = model(input_ids=torch.tensor([[45, 2]]), decoder_input_ids=torch.tensor([[1, 46]]))
    assert out.logits.shape[-1] == 48


def test_given_cache_is_used_even_when_config_disables_caching():
    model = tiny_model("dwlstm", use_cache=False)  # what Seq2SeqTrainer writes into saved configs
    input_ids, decoder_input_ids = random_ids(2, 7), random_ids(2, 4, seed=3)
    with torch.no_grad():
        full = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits
        first = model(
            input_ids=input_ids, decoder_input_ids=decoder_input_ids[:, :3], use_cache=True
        )
        last = model(
            input_ids=input_ids,
            decoder_input_ids=decoder_input_ids[:, 3:],
            **{CACHE_FIELD: getattr(first, CACHE_FIELD)},
        )
    torch.testing.assert_close(last.logits, full[:, 3:], rtol=1e-5, atol=1e-5)
