"""Language-aware LayerNorms and encoder-output transform (LaLN, LaLT; Zhang et al. 2020) on every
member: each sentence uses its target language's parameters, read from the tag its source starts
with, through training, generate() (greedy and beam, dynamic and static cache), the pipeline,
saving, remote code, the hub preset, threads sharing one model and copies of it."""

import copy
import io
import json
import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from conftest import CASES, TINY, WITHOUT_PACKAGE
from transformers import AutoConfig, AutoModelForSeq2SeqLM, pipeline

from modeling_dwlstm import DwLstmConfig, ResidualTransformerConfig
from modeling_dwlstm.language_aware import LanguageAwareLayerNorm
from modeling_dwlstm.modeling_dwlstm import LanguageAwareDepthWiseLstmGates
from modeling_dwlstm.precision import prepare_for_inference
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit import onnx_export
from nmt_toolkit.ctranslate2_export import check_exportable
from nmt_toolkit.hub import model_card
from nmt_toolkit.quickstart_corpus import generate_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

TAGS = {"de": 4, "en": 5, "fr": 6}  # token ids of <2de>, <2en>, <2fr> in the tiny vocabulary
LANGUAGE_AWARE = dict(
    language_pairs=["en-de", "de-en", "en-fr", "fr-en"],
    language_tag_ids=TAGS,
    language_aware_norm=True,
    language_aware_transform=True,
)
ROW = {"de": 0, "en": 1, "fr": 2}  # the sorted target languages
MEMBERS = [
    "residual-pre",
    "residual-post",
    "dwlstm",
    "dwlstm-two-lstm",
    "dwlstm-linear-none-gates-own-hidden-concat",
    "rnn-ffn-own-hidden-add",
    "dlcl-pre-learned",
    "ta-post",
    "highway-sdu-sigmoid-all-layers",
    "rezero",
]


def language_aware_model(case: str, seed: int = 0, **options):
    """A tiny model of `case` with LaLN and LaLT whose language-aware rows all differ (as after
    training)."""
    config_class, case_options = CASES[case]
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(
        config_class(**{**TINY, **case_options, **LANGUAGE_AWARE, **options})
    )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    return model.eval()


def tagged_sources(languages: list[str], length: int = 6, seed: int = 1) -> torch.Tensor:
    ids = torch.randint(
        7, 40, (len(languages), length), generator=torch.Generator().manual_seed(seed)
    )
    ids[:, 0] = torch.tensor([TAGS[language] for language in languages])
    return ids


def logits_of(model, input_ids, decoder_input_ids, attention_mask=None) -> torch.Tensor:
    with torch.no_grad():
        return model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids
        ).logits


@pytest.mark.parametrize("case", MEMBERS)
def test_each_sentence_uses_its_target_languages_parameters(case):
    """Two target languages in one batch give each sentence's outputs alone; changing one language's
    rows changes only the sentences into that language."""
    model = language_aware_model(case)
    input_ids, decoder_input_ids = tagged_sources(["de", "fr", "de"]), torch.randint(7, 40, (3, 4))
    mixed = logits_of(model, input_ids, decoder_input_ids)
    for i in range(3):
        torch.testing.assert_close(
            mixed[i],
            logits_of(model, input_ids[i : i + 1], decoder_input_ids[i : i + 1])[0],
            rtol=1e-5,
            atol=1e-5,
        )
    language_aware = [
        module
        for module in model.modules()
        if isinstance(module, (LanguageAwareLayerNorm, LanguageAwareDepthWiseLstmGates))
    ]
    assert language_aware and not any(
        isinstance(module, torch.nn.LayerNorm) for module in model.modules()
    )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter[ROW["fr"]].add_(0.5)  # French's gain and bias in every LayerNorm
            elif name.endswith(f"language_transform.projections.{ROW['fr']}.weight"):
                parameter.add_(0.5)
    changed = logits_of(model, input_ids, decoder_input_ids)
    torch.testing.assert_close(changed[[0, 2]], mixed[[0, 2]], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(changed[1], mixed[1], atol=1e-3)


def test_the_depthwise_lstm_gates_and_hidden_layer_norms_are_language_aware():
    model = language_aware_model("dwlstm-ffn-global-gates-own-hidden-add")
    gates = [
        module for module in model.modules() if isinstance(module, LanguageAwareDepthWiseLstmGates)
    ]
    assert len(gates) == 1 and gates[0].norm_weight.shape == gates[0].norm_bias.shape == (
        3,
        3,
        TINY["d_model"],
    )
    hidden_norms = [
        module for name, module in model.named_modules() if name.endswith("hidden.norm")
    ]
    assert hidden_norms and all(norm.weight.shape == (3, TINY["ffn_dim"]) for norm in hidden_norms)


def test_lalt_multiplies_the_encoder_output_by_the_target_languages_matrix():
    model = language_aware_model("residual-pre")
    input_ids = tagged_sources(["fr", "de", "en"])
    # left padding too
    attention_mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [0, 0, 1, 1, 1, 1]])
    input_ids[2, :2], input_ids[2, 2] = 1, TAGS["en"]
    with torch.no_grad():
        encoded = model.get_encoder()(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True
        )
    assert encoded.target_language.tolist() == [ROW["fr"], ROW["de"], ROW["en"]]
    projections = model.get_encoder().language_transform.projections
    assert all(projection.bias is None for projection in projections)
    for i, language in enumerate(["fr", "de", "en"]):
        expected = encoded.hidden_states[-1][i] @ projections[ROW[language]].weight.T  # H W_t
        torch.testing.assert_close(encoded.last_hidden_state[i], expected, rtol=1e-5, atol=1e-6)
    model.model.target_language.use(torch.zeros(0, dtype=torch.long))
    assert model.get_encoder().language_transform(torch.zeros(0, 6, TINY["d_model"])).shape == (
        0,
        6,
        TINY["d_model"],
    )


def interleaved(model, first, second) -> list:
    """`first()` and `second()` in two threads, `second()` from start to end while `first()` waits
    in the encoder's first layer, its sentences' target languages set and none read yet. Returns
    their results."""
    inside, done = threading.Event(), threading.Event()

    def pause(module, args):
        if not inside.is_set():  # the first thread's first encoder pass
            inside.set()
            done.wait(60)

    def second_while_first_waits():
        try:
            assert inside.wait(60), "the first thread never reached the encoder"
            return second()
        finally:
            done.set()

    hook = model.get_encoder().layers[0].register_forward_pre_hook(pause)
    try:
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(first), pool.submit(second_while_first_waits)]
            return [future.result(timeout=120) for future in futures]
    finally:
        hook.remove()


@pytest.mark.parametrize("case", ["residual-pre", "dwlstm"])
def test_threads_sharing_a_model_each_use_their_own_target_languages(case):
    """A server translating in threads with one model: while one thread's forward pass or generate()
    is under way, another runs the model on sentences into other languages, and each gets what it
    gets alone."""
    model = language_aware_model(case)
    sources = [tagged_sources(["de", "fr", "de"]), tagged_sources(["fr", "en", "en"], seed=2)]
    decoder_input_ids = torch.randint(7, 40, (3, 4))

    def forward(input_ids):
        return lambda: logits_of(model, input_ids, decoder_input_ids)

    def generate(input_ids):
        settings = dict(
            num_beams=2,
            max_new_tokens=4,
            min_new_tokens=4,
            return_dict_in_generate=True,
            output_logits=True,
        )
        return lambda: torch.stack(model.generate(input_ids=input_ids, **settings).logits)

    for run in (forward, generate):
        alone = [run(input_ids)() for input_ids in sources]
        together = interleaved(model, *(run(input_ids) for input_ids in sources))
        for result, expected in zip(together, alone):
            torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5)


def test_a_checkpointed_layer_rerun_in_autograds_thread_reads_the_steps_target_languages():
    """On a GPU the backward pass, and so a checkpointed layer's second run, is in the autograd
    engine's thread, which set no target languages: it reads those of the step (here backward() is
    called from another thread, which runs it there on the CPU too)."""
    model = language_aware_model("dwlstm").train()
    input_ids, labels = tagged_sources(["de", "fr", "en"]), torch.randint(7, 40, (3, 5))

    def gradients():
        model.zero_grad()
        loss = model(input_ids=input_ids, labels=labels).loss
        with ThreadPoolExecutor(1) as pool:
            pool.submit(loss.backward).result(timeout=120)
        return {name: parameter.grad.clone() for name, parameter in model.named_parameters()}

    expected = gradients()
    model.activation_checkpointing_enable()
    for name, gradient in gradients().items():
        torch.testing.assert_close(gradient, expected[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_copied_or_pickled_model_reads_its_own_target_language():
    """copy.deepcopy (int8 preparation of a copy, the benchmark) and torch.save of a whole model,
    after a forward pass: every reader of the copy reads the copy's TargetLanguage, and the copy
    translates as the model does."""
    model = language_aware_model("dwlstm")
    input_ids, decoder_input_ids = tagged_sources(["de", "fr"]), torch.randint(7, 40, (2, 4))
    expected = logits_of(model, input_ids, decoder_input_ids)
    saved = io.BytesIO()
    torch.save(model, saved)
    saved.seek(0)
    for copied in (copy.deepcopy(model), torch.load(saved, weights_only=False)):
        readers = [
            module for module in copied.modules() if getattr(module, "reads_target_language", False)
        ]
        assert readers and all(
            module.target_language is copied.model.target_language for module in readers
        )
        assert copied.model.target_language is not model.model.target_language
        torch.testing.assert_close(
            logits_of(copied, input_ids, decoder_input_ids), expected, rtol=1e-5, atol=1e-6
        )
    int8 = prepare_for_inference(copy.deepcopy(model), quantize="int8")
    assert logits_of(int8, input_ids, decoder_input_ids).shape == expected.shape


def test_a_model_without_the_options_is_unchanged():
    plain = AutoModelForSeq2SeqLM.from_config(
        ResidualTransformerConfig(**TINY, norm_position="pre")
    )
    language_aware = language_aware_model("residual-pre")
    plain_keys = set(plain.state_dict())
    assert not any("language_transform" in key for key in plain_keys)
    extra = set(language_aware.state_dict()) - plain_keys
    assert extra == {
        f"model.encoder.language_transform.projections.{row}.weight" for row in range(3)
    }
    shapes = {
        key: tuple(value.shape)
        for key, value in language_aware.state_dict().items()
        if key.endswith("norm.weight")
    }
    assert set(shapes.values()) == {(3, TINY["d_model"])}


GENERATE_REMOTE = WITHOUT_PACKAGE + textwrap.dedent(
    """
    import json, sys, torch
    from transformers import AutoModelForSeq2SeqLM
    model = AutoModelForSeq2SeqLM.from_pretrained("saved", trust_remote_code=True).eval()
    assert model.__class__.__module__.startswith("transformers_modules"), model.__class__.__module__
    input_ids = torch.tensor(json.loads(sys.argv[1]))
    print(json.dumps(model.generate(input_ids=input_ids, num_beams=2, max_new_tokens=5).tolist()))
    """
)


@pytest.mark.parametrize("case", ["residual-pre", "dwlstm"])
def test_saved_model_reloads_strictly_and_as_remote_code_and_generates_the_same_with_any_cache(
    case, tmp_path
):
    model = language_aware_model(case)
    input_ids = tagged_sources(["de", "en", "fr"], length=7)
    attention_mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 7])
    outputs = {}
    for num_beams in (1, 2):
        settings = dict(
            input_ids=input_ids,
            attention_mask=attention_mask,
            num_beams=num_beams,
            max_new_tokens=6,
            min_new_tokens=6,
            do_sample=False,
        )
        outputs[num_beams] = model.generate(**settings)
        assert torch.equal(model.generate(**settings, use_cache=False), outputs[num_beams])
        assert torch.equal(
            model.generate(**settings, cache_implementation="static"), outputs[num_beams]
        )
    model.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["language_tag_ids"] == TAGS
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(
        tmp_path / "saved", output_loading_info=True
    )
    assert not any(info.values()), info
    assert torch.equal(
        loaded.eval().generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            num_beams=2,
            max_new_tokens=6,
            min_new_tokens=6,
        ),
        outputs[2],
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-c", GENERATE_REMOTE, json.dumps(input_ids[:1].tolist())],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected = model.generate(input_ids=input_ids[:1], num_beams=2, max_new_tokens=5).tolist()
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


def test_the_pipeline_and_a_mixed_direction_call_pick_the_language_by_the_tag(tmp_path):
    pairs = generate_pairs(60, seed=3)
    tokenizer = train_joint_bpe_tokenizer(
        [text for pair in pairs for text in pair], vocab_size=200, language_tags=["<2de>", "<2en>"]
    )
    torch.manual_seed(0)
    config = DwLstmConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=32,
        language_pairs=["en-de", "de-en"],
        language_aware_norm=True,
        language_aware_transform=True,
    )
    assert config.language_tag_ids == {"de": 4, "en": 5}
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    greedy = dict(num_beams=1, max_new_tokens=6)
    english, german = pairs[0]

    def by_hand(text, target):
        ids = tokenizer(f"<2{target}> {text}", return_tensors="pt")
        return tokenizer.decode(model.generate(**ids, **greedy)[0], skip_special_tokens=True)

    expected = [by_hand(english, "de"), by_hand(german, "en")]
    assert translator(english, src_lang="en", tgt_lang="de", **greedy) == [
        {"translation_text": expected[0]}
    ]
    mixed = translator(
        [{"text": english, "tgt_lang": "de"}, {"text": german, "tgt_lang": "en"}],
        batch_size=2,
        **greedy,
    )
    assert mixed == [{"translation_text": text} for text in expected]


def test_clear_errors_without_target_languages_or_tags(tmp_path):
    for option in ("language_aware_norm", "language_aware_transform"):
        with pytest.raises(
            ValueError,
            match=f"`{option}=True` selects parameters by the target language, and this "
            "model has no target languages: set `language_pairs`",
        ):
            ResidualTransformerConfig(**TINY, **{option: True})
    with pytest.raises(ValueError, match=r"no tag for the target languages \['fr'\]"):
        ResidualTransformerConfig(
            **{**TINY, **LANGUAGE_AWARE, "language_tag_ids": {"de": 4, "en": 5}}
        )
    with pytest.raises(ValueError, match="`language_aware_norm` must be True or False"):
        ResidualTransformerConfig(**TINY, language_aware_norm="yes")
    with pytest.raises(ValueError, match="`language_tag_ids` maps language codes"):
        ResidualTransformerConfig(**TINY, language_tag_ids={"de": 400})
    model = language_aware_model("residual-pre")
    untagged = tagged_sources(["de", "en"])
    untagged[1, 0] = 9
    with pytest.raises(
        ValueError,
        match=r"Source sentence 1 starts with token 9, not the tag of one of this model's "
        r"target languages \{'de': 4, 'en': 5, 'fr': 6\}",
    ):
        model.generate(input_ids=untagged, max_new_tokens=3)
    with pytest.raises(ValueError, match="pass `input_ids`, not only `inputs_embeds`"):
        model(
            inputs_embeds=torch.zeros(1, 3, TINY["d_model"]),
            decoder_input_ids=torch.ones(1, 2, dtype=torch.long),
        )
    encoded = model.get_encoder()(input_ids=tagged_sources(["de"]))
    with pytest.raises(ValueError, match="decoder needs each sentence's target language"):
        model(
            encoder_outputs=(encoded.last_hidden_state,),
            decoder_input_ids=torch.ones(1, 2, dtype=torch.long),
        )
    without_tags = language_aware_model("residual-pre", language_tag_ids={})
    with pytest.raises(
        ValueError, match=r"no `language_tag_ids` for the target languages \['de', 'en', 'fr'\]"
    ):
        without_tags(
            input_ids=tagged_sources(["de"]), decoder_input_ids=torch.ones(1, 2, dtype=torch.long)
        )
    with pytest.raises(
        ValueError, match="LaLN / LaLT, Zhang et al. 2020.*CTranslate2's Transformer cannot express"
    ):
        check_exportable(model)
    with pytest.raises(
        ValueError, match="ONNX export does not take a model with language-aware parameters"
    ):
        onnx_export.check_exportable(model)


def test_the_opus100_table7_baseline_preset():
    """Xu et al. 2024, Table 7's "Transformer + LaLN + LaLT": the residual pre-norm OPUS-100 model
    with both options: per target language (100 of them) a gain and bias for each of its 32
    LayerNorms and a 512 x 512 matrix."""
    hub_configs = Path(__file__).resolve().parents[1] / "hub_configs"
    config = AutoConfig.from_pretrained(
        hub_configs / "residual-prenorm-laln-lalt-opus100-base-6l.json"
    )
    plain = AutoConfig.from_pretrained(hub_configs / "residual-prenorm-opus100-base-6l.json")
    assert (
        config.language_aware_norm
        and config.language_aware_transform
        and len(config.target_languages) == 100
    )
    fields, plain_fields = config.to_dict(), plain.to_dict()
    assert {
        name
        for name in fields.keys() | plain_fields.keys()
        if not name.startswith("_") and fields.get(name) != plain_fields.get(name)
    } == {"language_aware_norm", "language_aware_transform"}
    with torch.device("meta"):
        counts = [AutoModelForSeq2SeqLM.from_config(c).num_parameters() for c in (config, plain)]
    # two per encoder layer, three per decoder layer, a final one per stack
    norms = (2 * 6 + 1) + (3 * 6 + 1)
    assert counts[0] - counts[1] == norms * 2 * 512 * (100 - 1) + 100 * 512 * 512


def test_the_model_card_names_the_options_and_cites_their_paper():
    card = model_card(language_aware_model("dwlstm"), "Multi30k", None, repo_id="user/m2m")
    assert (
        "| language_aware_norm | `True` |" in card
        and "| language_aware_transform | `True` |" in card
    )
    assert "zhang2020improving" in card
    plain = model_card(
        AutoModelForSeq2SeqLM.from_config(DwLstmConfig(**TINY)), "Multi30k", None, repo_id="user/x"
    )
    assert "language_aware" not in plain and "zhang2020improving" not in plain
