"""Language-aware LayerNorms and encoder-output transform (LaLN, LaLT; Zhang et al. 2020) on every member: each
sentence uses its target language's parameters, read from the tag its source starts with, through training,
generate() (greedy and beam, dynamic and static cache), the pipeline, saving, remote code and the hub preset."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import CASES, TINY, WITHOUT_PACKAGE
from transformers import AutoConfig, AutoModelForSeq2SeqLM, pipeline

from modeling_dwlstm import DwLstmConfig, ResidualTransformerConfig
from modeling_dwlstm.modeling_dwlstm import LanguageAwareDepthWiseLstmGates
from modeling_dwlstm.modeling_translation import LanguageAwareLayerNorm
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.ctranslate2_export import check_exportable
from nmt_toolkit.hub import model_card
from nmt_toolkit.quickstart_corpus import generate_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

TAGS = {"de": 4, "en": 5, "fr": 6}  # token ids of <2de>, <2en>, <2fr> in the tiny vocabulary
LANGUAGE_AWARE = dict(language_pairs=["en-de", "de-en", "en-fr", "fr-en"], language_tag_ids=TAGS,
                      language_aware_norm=True, language_aware_transform=True)
ROW = {"de": 0, "en": 1, "fr": 2}  # the sorted target languages
MEMBERS = ["residual-pre", "residual-post", "dwlstm", "dwlstm-two-lstm", "dwlstm-linear-none-gates-own-hidden-concat",
           "rnn-ffn-own-hidden-add", "dlcl-pre-learned", "ta-post", "highway-sdu-sigmoid-all-layers", "rezero"]


def language_aware_model(case: str, seed: int = 0, **options):
    """A tiny model of `case` with LaLN and LaLT whose language-aware rows all differ (as after training)."""
    config_class, case_options = CASES[case]
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(config_class(**{**TINY, **case_options, **LANGUAGE_AWARE, **options}))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    return model.eval()


def tagged_sources(languages: list[str], length: int = 6, seed: int = 1) -> torch.Tensor:
    ids = torch.randint(7, 40, (len(languages), length), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = torch.tensor([TAGS[language] for language in languages])
    return ids


def logits_of(model, input_ids, decoder_input_ids, attention_mask=None) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits


@pytest.mark.parametrize("case", MEMBERS)
def test_each_sentence_uses_its_target_languages_parameters(case):
    """Two target languages in one batch give each sentence's outputs alone; changing one language's rows changes
    only the sentences into that language."""
    model = language_aware_model(case)
    input_ids, decoder_input_ids = tagged_sources(["de", "fr", "de"]), torch.randint(7, 40, (3, 4))
    mixed = logits_of(model, input_ids, decoder_input_ids)
    for i in range(3):
        torch.testing.assert_close(mixed[i], logits_of(model, input_ids[i:i + 1], decoder_input_ids[i:i + 1])[0],
                                   rtol=1e-5, atol=1e-5)
    language_aware = [module for module in model.modules()
                      if isinstance(module, (LanguageAwareLayerNorm, LanguageAwareDepthWiseLstmGates))]
    assert language_aware and not any(isinstance(module, torch.nn.LayerNorm) for module in model.modules())
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
    gates = [module for module in model.modules() if isinstance(module, LanguageAwareDepthWiseLstmGates)]
    assert len(gates) == 1 and gates[0].norm_weight.shape == gates[0].norm_bias.shape == (3, 3, TINY["d_model"])
    hidden_norms = [module for name, module in model.named_modules() if name.endswith("hidden.norm")]
    assert hidden_norms and all(norm.weight.shape == (3, TINY["ffn_dim"]) for norm in hidden_norms)


def test_lalt_multiplies_the_encoder_output_by_the_target_languages_matrix():
    model = language_aware_model("residual-pre")
    input_ids = tagged_sources(["fr", "de", "en"])
    attention_mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [0, 0, 1, 1, 1, 1]])  # left padding too
    input_ids[2, :2], input_ids[2, 2] = 1, TAGS["en"]
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    assert encoded.target_language.tolist() == [ROW["fr"], ROW["de"], ROW["en"]]
    projections = model.get_encoder().language_transform.projections
    assert all(projection.bias is None for projection in projections)
    for i, language in enumerate(["fr", "de", "en"]):
        expected = encoded.hidden_states[-1][i] @ projections[ROW[language]].weight.T  # H W_t
        torch.testing.assert_close(encoded.last_hidden_state[i], expected, rtol=1e-5, atol=1e-6)


def test_a_model_without_the_options_is_unchanged():
    plain = AutoModelForSeq2SeqLM.from_config(ResidualTransformerConfig(**TINY, norm_position="pre"))
    language_aware = language_aware_model("residual-pre")
    plain_keys = set(plain.state_dict())
    assert not any("language_transform" in key for key in plain_keys)
    extra = set(language_aware.state_dict()) - plain_keys
    assert extra == {f"model.encoder.language_transform.projections.{row}.weight" for row in range(3)}
    shapes = {key: tuple(value.shape) for key, value in language_aware.state_dict().items() if key.endswith("norm.weight")}
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
def test_saved_model_reloads_strictly_and_as_remote_code_and_generates_the_same_with_any_cache(case, tmp_path):
    model = language_aware_model(case)
    input_ids = tagged_sources(["de", "en", "fr"], length=7)
    attention_mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 7])
    outputs = {}
    for num_beams in (1, 2):
        settings = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=num_beams, max_new_tokens=6,
                        min_new_tokens=6, do_sample=False)
        outputs[num_beams] = model.generate(**settings)
        assert torch.equal(model.generate(**settings, use_cache=False), outputs[num_beams])
        assert torch.equal(model.generate(**settings, cache_implementation="static"), outputs[num_beams])
    model.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["language_tag_ids"] == TAGS
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "saved", output_loading_info=True)
    assert not any(info.values()), info
    assert torch.equal(loaded.eval().generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=2,
                                              max_new_tokens=6, min_new_tokens=6), outputs[2])
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-c", GENERATE_REMOTE, json.dumps(input_ids[:1].tolist())], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = model.generate(input_ids=input_ids[:1], num_beams=2, max_new_tokens=5).tolist()
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


def test_the_pipeline_and_a_mixed_direction_call_pick_the_language_by_the_tag(tmp_path):
    pairs = generate_pairs(60, seed=3)
    tokenizer = train_joint_bpe_tokenizer([text for pair in pairs for text in pair], vocab_size=200,
                                          language_tags=["<2de>", "<2en>"])
    torch.manual_seed(0)
    config = DwLstmConfig(**tokenizer_model_kwargs(tokenizer), d_model=16, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=2, decoder_attention_heads=2, ffn_dim=32, language_pairs=["en-de", "de-en"],
                          language_aware_norm=True, language_aware_transform=True)
    assert config.language_tag_ids == {"de": 4, "en": 5}
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    greedy = dict(num_beams=1, max_new_tokens=6)
    english, german = pairs[0]

    def by_hand(text, target):
        ids = tokenizer(f"<2{target}> {text}", return_tensors="pt")
        return tokenizer.decode(model.generate(**ids, **greedy)[0], skip_special_tokens=True)

    expected = [by_hand(english, "de"), by_hand(german, "en")]
    assert translator(english, src_lang="en", tgt_lang="de", **greedy) == [{"translation_text": expected[0]}]
    mixed = translator([{"text": english, "tgt_lang": "de"}, {"text": german, "tgt_lang": "en"}], batch_size=2, **greedy)
    assert mixed == [{"translation_text": text} for text in expected]


def test_clear_errors_without_target_languages_or_tags(tmp_path):
    for option in ("language_aware_norm", "language_aware_transform"):
        with pytest.raises(ValueError, match=f"`{option}=True` selects parameters by the target language, and this "
                                             "model has no target languages: set `language_pairs`"):
            ResidualTransformerConfig(**TINY, **{option: True})
    with pytest.raises(ValueError, match=r"no tag for the target languages \['fr'\]"):
        ResidualTransformerConfig(**{**TINY, **LANGUAGE_AWARE, "language_tag_ids": {"de": 4, "en": 5}})
    with pytest.raises(ValueError, match="`language_aware_norm` must be True or False"):
        ResidualTransformerConfig(**TINY, language_aware_norm="yes")
    with pytest.raises(ValueError, match="`language_tag_ids` maps language codes"):
        ResidualTransformerConfig(**TINY, language_tag_ids={"de": 400})
    model = language_aware_model("residual-pre")
    untagged = tagged_sources(["de", "en"])
    untagged[1, 0] = 9
    with pytest.raises(ValueError, match=r"Source sentence 1 starts with token 9, not the tag of one of this model's "
                                         r"target languages \{'de': 4, 'en': 5, 'fr': 6\}"):
        model.generate(input_ids=untagged, max_new_tokens=3)
    with pytest.raises(ValueError, match="pass `input_ids`, not only `inputs_embeds`"):
        model(inputs_embeds=torch.zeros(1, 3, TINY["d_model"]), decoder_input_ids=torch.ones(1, 2, dtype=torch.long))
    encoded = model.get_encoder()(input_ids=tagged_sources(["de"]))
    with pytest.raises(ValueError, match="decoder needs each sentence's target language"):
        model(encoder_outputs=(encoded.last_hidden_state,), decoder_input_ids=torch.ones(1, 2, dtype=torch.long))
    without_tags = language_aware_model("residual-pre", language_tag_ids={})
    with pytest.raises(ValueError, match=r"no `language_tag_ids` for the target languages \['de', 'en', 'fr'\]"):
        without_tags(input_ids=tagged_sources(["de"]), decoder_input_ids=torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="LaLN / LaLT, Zhang et al. 2020.*CTranslate2's Transformer cannot express"):
        check_exportable(model)


def test_the_opus100_table7_baseline_preset():
    """Xu et al. 2024, Table 7's "Transformer + LaLN + LaLT": the residual pre-norm OPUS-100 model with both options:
    per target language (100 of them) a gain and bias for each of its 32 LayerNorms and a 512 x 512 matrix."""
    hub_configs = Path(__file__).resolve().parents[1] / "hub_configs"
    config = AutoConfig.from_pretrained(hub_configs / "residual-prenorm-laln-lalt-opus100-base-6l.json")
    plain = AutoConfig.from_pretrained(hub_configs / "residual-prenorm-opus100-base-6l.json")
    assert config.language_aware_norm and config.language_aware_transform and len(config.target_languages) == 100
    fields, plain_fields = config.to_dict(), plain.to_dict()
    assert {name for name in fields.keys() | plain_fields.keys()
            if not name.startswith("_") and fields.get(name) != plain_fields.get(name)} == {
        "language_aware_norm", "language_aware_transform"}
    with torch.device("meta"):
        counts = [AutoModelForSeq2SeqLM.from_config(c).num_parameters() for c in (config, plain)]
    norms = (2 * 6 + 1) + (3 * 6 + 1)  # two per encoder layer, three per decoder layer, a final one per stack
    assert counts[0] - counts[1] == norms * 2 * 512 * (100 - 1) + 100 * 512 * 512


def test_the_model_card_names_the_options_and_cites_their_paper():
    card = model_card(language_aware_model("dwlstm"), "Multi30k", None, repo_id="user/m2m")
    assert "| language_aware_norm | `True` |" in card and "| language_aware_transform | `True` |" in card
    assert "zhang2020improving" in card
    plain = model_card(AutoModelForSeq2SeqLM.from_config(DwLstmConfig(**TINY)), "Multi30k", None, repo_id="user/x")
    assert "language_aware" not in plain and "zhang2020improving" not in plain
