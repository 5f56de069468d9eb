"""Hub: the model card, and a push / pull round trip against a loopback Hub
(tests/hub_server.py)."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import WITHOUT_PACKAGE
from hub_server import LoopbackHub
from huggingface_hub import RepoCard
from transformers import AutoModelForSeq2SeqLM, pipeline

from modeling_dwlstm import MEMBERS, DwLstmConfig, ResidualTransformerConfig
from modeling_dwlstm.tokenization_dwlstm import (
    tokenizer_model_kwargs,
    train_joint_bpe_tokenizer,
)
from nmt_toolkit.hub import model_card, push_translation_model, read_results
from nmt_toolkit.quickstart_corpus import generate_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

DECODE = {"num_beams": 2, "max_new_tokens": 6}
RESULTS = {
    "test_set": "quickstart/test",
    "sentences": 300,
    "num_beams": 4,
    "length_penalty": 1.0,
    "sacrebleu": 61.23,
    "sacrebleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
    "tokenized_bleu": 63.4,
    "chrf": 80.5,
    "sentences_per_second": 42.0,
    "device": "cpu",
}


@pytest.fixture(scope="module")
def tokenizer():
    pairs = generate_pairs(200, seed=2)
    return train_joint_bpe_tokenizer([text for pair in pairs for text in pair], vocab_size=300)


def tiny_model(tokenizer, config_class=DwLstmConfig, **options):
    torch.manual_seed(0)
    config = config_class(
        **tokenizer_model_kwargs(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=64,
        max_position_embeddings=128,
        language_pairs=["en-de"],
        **options,
    )
    return AutoModelForSeq2SeqLM.from_config(config).eval()


# The papers and member-specific fields, written out here so that a wrong record fails.
CARD_FACTS = {
    "dwlstm": (
        "Rewiring the Transformer with Depth-Wise {LSTM}s",
        {"lstm_hidden", "share_gates", "share_hidden", "decoder_merge"},
    ),
    "dwlstm-residual": ("Attention Is All You Need", {"norm_position"}),
    "dwlstm-highway": (
        "Highway Transformer: Self-Gating Enhanced Self-Attentive Networks",
        {"highway_variant", "sdu_gate", "sdu_layers"},
    ),
    "dwlstm-rnn": (
        "Rewiring the Transformer with Depth-Wise {LSTM}s",
        {"lstm_hidden", "share_hidden", "decoder_merge"},
    ),
    "dwlstm-dlcl": (
        "Learning Deep Transformer Models for Machine Translation",
        {"dlcl_weights", "dlcl_layer_norm", "norm_position"},
    ),
    "dwlstm-ta": (
        "Training Deeper Neural Machine Translation Models with Transparent Attention",
        {"norm_position"},
    ),
    "dwlstm-rezero": ("{ReZero} is All You Need", set()),
}
MEMBER_FIELDS = {
    "lstm_hidden",
    "share_gates",
    "share_hidden",
    "decoder_merge",
    "norm_position",
    "highway_variant",
    "sdu_gate",
    "sdu_layers",
    "dlcl_weights",
    "dlcl_layer_norm",
}


@pytest.mark.parametrize("member", MEMBERS, ids=lambda member: member.config_class.model_type)
def test_every_member_card_names_its_paper_and_fields(tokenizer, member):
    paper, fields = CARD_FACTS[member.config_class.model_type]
    model = tiny_model(tokenizer, member.config_class)
    card = model_card(model, "data")
    assert paper in card and f"A {member.name} translation model" in card
    for field in MEMBER_FIELDS:
        assert (f"| {field} | `{getattr(model.config, field, None)}` |" in card) == (
            field in fields
        ), field
    if "depth-wise" not in member.name.lower():
        assert "Depth-Wise" not in card  # only the depth-wise members cite Xu et al.


def test_model_card_describes_architecture_data_results_and_citation(tokenizer):
    model = tiny_model(tokenizer)
    card = model_card(
        model, "200 generated pairs of the quickstart grammar.", RESULTS, repo_id="user/tiny"
    )
    metadata = RepoCard(card).data.to_dict()
    assert metadata["language"] == ["en", "de"] and metadata["pipeline_tag"] == "translation"
    assert metadata["library_name"] == "transformers" and "dwlstm" in metadata["tags"]
    for text in (
        "| encoder_layers | `2` |",
        "| lstm_hidden | `glu` |",
        "200 generated pairs",
        "| sacreBLEU | 61.23 |",
        "| tokenized case-sensitive BLEU (as in the papers) | 63.4 |",
        "| chrF | 80.5 |",
        RESULTS["sacrebleu_signature"],
        'pipeline("translation_en_to_de", model="user/tiny", trust_remote_code=True)',
        # without: transformers asks [y/N]
        'AutoTokenizer.from_pretrained("user/tiny", trust_remote_code=True)',
        "Rewiring the Transformer with Depth-Wise {LSTM}s",
        "Transformer with Depth-Wise {LSTM}",
    ):
        assert text in card, text
    assert f"{model.num_parameters() / 1e6:.2f}M parameters" in card
    residual = model_card(
        tiny_model(tokenizer, ResidualTransformerConfig, norm_position="pre"), "data"
    )
    assert "Attention Is All You Need" in residual and "| norm_position | `pre` |" in residual
    assert "Not evaluated yet." in residual and "lstm_hidden" not in residual
    with pytest.raises(ValueError, match="trained on"):
        model_card(model, "  ")


def test_read_results_rejects_what_is_not_a_results_file(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(RESULTS))
    assert read_results(tmp_path / "results.json") == RESULTS
    (tmp_path / "other.json").write_text(json.dumps({"loss": 1.0}))
    with pytest.raises(ValueError, match="no `sacrebleu`"):
        read_results(tmp_path / "other.json")
    with pytest.raises(ValueError, match="Cannot read"):
        read_results(tmp_path / "missing.json")


PULL_SCRIPT = WITHOUT_PACKAGE + textwrap.dedent(
    """
    import hashlib, json, sys
    from transformers import AutoModelForSeq2SeqLM, pipeline
    repo_id, sentences, settings = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    model = AutoModelForSeq2SeqLM.from_pretrained(repo_id, trust_remote_code=True)
    weights = hashlib.sha256(b"".join(t.numpy().tobytes() for _, t in sorted(model.state_dict().items()))).hexdigest()
    translator = pipeline("translation", model=repo_id, trust_remote_code=True)
    print(json.dumps({"class": type(model).__module__ + "." + type(model).__name__,
                      "pipeline": type(translator).__module__, "weights": weights,
                      "translations": translator(sentences, **settings)}))
    """  # noqa: E501
)


def weights_digest(model) -> str:
    """The same digest as PULL_SCRIPT's: equal only for bitwise equal weights."""
    tensors = sorted(model.state_dict().items())
    return hashlib.sha256(b"".join(tensor.numpy().tobytes() for _, tensor in tensors)).hexdigest()


def test_push_then_pull_without_the_package_gives_the_same_model_and_translations(
    tokenizer, tmp_path
):
    model = tiny_model(tokenizer)
    sentences = ["The dog sleeps.", "A small girl found an old book."]
    expected = pipeline("translation", model=model, tokenizer=tokenizer)(sentences, **DECODE)
    card = model_card(model, "200 generated pairs.", RESULTS, repo_id="user/tiny-dwlstm")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "HF_HUB_OFFLINE")
    }
    with LoopbackHub() as hub:
        first = push_translation_model(
            model, tokenizer, "user/tiny-dwlstm", card, endpoint=hub.endpoint, token="t"
        )
        files = set(hub.repos["user/tiny-dwlstm"])
        assert {
            "README.md",
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "modeling_dwlstm.py",
            "modeling_translation.py",
            "configuration_translation.py",
            "pipeline_translation.py",
        } <= files
        assert hub.repos["user/tiny-dwlstm"]["README.md"].decode() == card
        config = json.loads(hub.repos["user/tiny-dwlstm"]["config.json"])
        assert (
            "AutoModelForSeq2SeqLM" in config["auto_map"]
            and "translation" in config["custom_pipelines"]
        )

        env.update(
            HF_ENDPOINT=hub.endpoint,
            HF_HOME=str(tmp_path / "hf"),
            HF_MODULES_CACHE=str(tmp_path / "modules"),
            OMP_NUM_THREADS="1",
        )
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                PULL_SCRIPT,
                "user/tiny-dwlstm",
                json.dumps(sentences),
                json.dumps(DECODE),
            ],
            check=False,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        pulled = json.loads(result.stdout.strip().splitlines()[-1])
        # it really came from the Hub
        assert ("GET", "/api/models/user/tiny-dwlstm") in hub.requests
        # Pushing again (a further trained model, say) is a new commit on the same repository.
        second = push_translation_model(
            model, tokenizer, "user/tiny-dwlstm", card + "\nv2\n", endpoint=hub.endpoint, token="t"
        )
        assert second.oid != first.oid
    assert pulled["class"].startswith("transformers_modules.") and pulled["class"].endswith(
        "DwLstmForConditionalGeneration"
    )
    assert pulled["pipeline"].startswith("transformers_modules.")
    assert pulled["weights"] == weights_digest(model)
    assert pulled["translations"] == expected


@pytest.mark.parametrize("repo_id", ["tiny", "user/", "a/b/c", None])
def test_push_rejects_a_bad_repo_id(tokenizer, repo_id):
    with pytest.raises(ValueError, match="user/name"):
        push_translation_model(
            tiny_model(tokenizer), tokenizer, repo_id, "card", endpoint="http://127.0.0.1:9"
        )


RESAVE_SCRIPT = WITHOUT_PACKAGE + textwrap.dedent(
    """
    import json, sys
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
    sentences, settings = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    model = AutoModelForSeq2SeqLM.from_pretrained("saved", trust_remote_code=True)  # as run_translation.py loads it
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    model.save_pretrained("resaved")  # after fine-tuning, say
    AutoTokenizer.from_pretrained("saved", trust_remote_code=True).save_pretrained("resaved")
    translator = pipeline("translation_en_to_de", model="resaved", trust_remote_code=True)
    print(json.dumps(translator(sentences, **settings)))
    """  # noqa: E501
)


def files_named_by_config(directory) -> set[str]:
    """The code files a saved config.json names: its `auto_map` classes' and its `custom_pipelines`'
    modules."""
    config = json.loads((directory / "config.json").read_text())
    references = [
        *config["auto_map"].values(),
        *(entry["impl"] for entry in config["custom_pipelines"].values()),
    ]
    return {reference.rsplit(".", 1)[0] + ".py" for reference in references}


def test_a_model_loaded_as_remote_code_and_saved_again_is_served_without_the_package(
    tokenizer, tmp_path
):
    model = tiny_model(tokenizer)
    sentences = ["The dog sleeps.", "A small girl found an old book."]
    expected = pipeline("translation_en_to_de", model=model, tokenizer=tokenizer)(
        sentences, **DECODE
    )
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    assert "pipeline_translation.py" in files_named_by_config(tmp_path / "saved")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-c", RESAVE_SCRIPT, json.dumps(sentences), json.dumps(DECODE)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for directory in (tmp_path / "saved", tmp_path / "resaved"):
        missing = {
            name for name in files_named_by_config(directory) if not (directory / name).is_file()
        }
        assert not missing, f"{directory.name}/config.json names {missing}, which were not written"
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected
