"""The compatibility suite: run under every transformers (and torch) version of the matrix by
`make test-compat`, each in its own venv, against `reference.json` (written by the main environment,
see make_reference.py).

A failure names the transformers version it ran under and what differs from the reference, so that a
behaviour change in transformers shows up as a failed check here rather than as different
translations for users."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers
from transformers import AutoConfig, AutoModelForSeq2SeqLM, pipeline

import modeling_dwlstm
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer

sys.path.insert(0, str(Path(__file__).parent))
import cases  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
# tests/fixtures/make_checkpoints.py's inputs (that file imports the main suite's conftest, which
# this suite avoids).
INPUT_IDS = [[5, 7, 9, 11, 2], [4, 6, 8, 2, 1]]
DECODER_INPUT_IDS = [[0, 12, 13, 14], [0, 15, 16, 17]]
VERSIONS = f"transformers {transformers.__version__}, torch {torch.__version__}"
REFERENCE = cases.load_reference()
REFERENCE_VERSIONS = f"transformers {REFERENCE['transformers']}, torch {REFERENCE['torch']}"
CASES = [(model_type, search) for model_type in cases.members() for search in cases.SEARCHES]
SENTENCES = [
    "a dog runs in the park",
    "two men play music on the street",
    "a woman reads a book",
    "ein hund rennt im park",
    "zwei männer spielen musik auf der straße",
    "eine frau liest ein buch",
] * 3


@pytest.fixture(autouse=True, scope="module")
def quiet():
    transformers.logging.set_verbosity_error()


def test_every_member_is_registered():
    assert set(cases.members()) == set(REFERENCE["tokens"]), (
        "reference.json is stale: run make_reference.py"
    )
    for model_type, config_class in cases.members().items():
        assert type(AutoConfig.for_model(model_type)) is config_class, (
            f"{model_type} is not registered ({VERSIONS})"
        )


@pytest.mark.parametrize("case", sorted(path.name for path in FIXTURES.iterdir()))
def test_checkpoints_saved_by_earlier_versions_load_with_their_logits(case):
    model, info = AutoModelForSeq2SeqLM.from_pretrained(FIXTURES / case, output_loading_info=True)
    assert {key: value for key, value in info.items() if value} == {}, (
        f"{case} under {VERSIONS}: {info}"
    )
    with torch.no_grad():
        logits = model.eval()(
            input_ids=torch.tensor(INPUT_IDS),
            attention_mask=(torch.tensor(INPUT_IDS) != 1).long(),
            decoder_input_ids=torch.tensor(DECODER_INPUT_IDS),
        ).logits
    expected = torch.tensor(json.loads((FIXTURES / case / "logits.json").read_text()))
    torch.testing.assert_close(
        logits, expected, atol=1e-5, rtol=0, msg=lambda text: f"{case} under {VERSIONS}: {text}"
    )


@pytest.mark.parametrize("model_type,search", CASES)
def test_generate_gives_the_reference_tokens(model_type, search):
    tokens = cases.generate(cases.tiny_model(model_type), search)
    assert tokens == REFERENCE["tokens"][model_type][search], (
        f"{model_type} {search}: generate() under {VERSIONS} gives {tokens}, transformers' own "
        f"loop under {REFERENCE_VERSIONS} gave {REFERENCE['tokens'][model_type][search]}"
    )


@pytest.mark.parametrize("model_type,search", CASES)
def test_transformers_loop_gives_the_reference_tokens(model_type, search):
    """transformers' own loop (GenerationMixin.generate): a difference here is a change in
    transformers' search or in the model's forward under this version, not in the family's
    decoding."""
    tokens = cases.generate(cases.tiny_model(model_type), search, transformers_loop=True)
    assert tokens == REFERENCE["tokens"][model_type][search], (
        f"{model_type} {search}: GenerationMixin.generate under {VERSIONS} gives {tokens}, under "
        f"{REFERENCE_VERSIONS} {REFERENCE['tokens'][model_type][search]}"
    )


def test_trainer_gives_the_reference_losses(tmp_path):
    losses = cases.trainer_losses(str(tmp_path))
    assert losses == pytest.approx(REFERENCE["trainer_losses"], rel=1e-4), (
        f"Trainer losses under {VERSIONS}: {losses}; under {REFERENCE_VERSIONS}: "
        f"{REFERENCE['trainer_losses']}"
    )


@pytest.fixture(scope="module")
def translator_parts():
    tokenizer = train_joint_bpe_tokenizer(
        SENTENCES, vocab_size=80, language_tags=["<2de>", "<2en>"]
    )
    torch.manual_seed(0)
    config = modeling_dwlstm.DwLstmConfig(
        **{**cases.TINY, **tokenizer_model_kwargs(tokenizer)}, language_pairs=["en-de"]
    )
    return AutoModelForSeq2SeqLM.from_config(config).eval(), tokenizer


def decoded_generate(model, tokenizer, text: str, **settings) -> str:
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, **settings)
    return tokenizer.decode(output[0], skip_special_tokens=True)


@pytest.mark.parametrize("task", ["translation", "translation_en_to_de"])
def test_pipeline_translates_as_generate_does(translator_parts, task):
    model, tokenizer = translator_parts
    translator = pipeline(task, model=model, tokenizer=tokenizer)
    assert type(translator) is modeling_dwlstm.TranslationPipeline, (
        f"{task} under {VERSIONS}: {type(translator)}"
    )
    expected = decoded_generate(model, tokenizer, SENTENCES[0], num_beams=2, max_new_tokens=6)
    assert translator(SENTENCES[0], num_beams=2, max_new_tokens=6) == [
        {"translation_text": expected}
    ]


# Runs in a process where modeling_dwlstm cannot be imported: the saved code alone must load
# the models.
REMOTE_CODE = textwrap.dedent("""
    import json, sys
    sys.modules["modeling_dwlstm"] = None
    import torch, transformers
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
    transformers.logging.set_verbosity_error()
    folders, searches, text = json.loads(sys.argv[1])
    batch = {name: torch.tensor(value) for name, value in json.loads(sys.argv[2]).items()}
    tokens = {}
    for model_type, folder in folders.items():
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        assert not type(model).__module__.startswith("modeling_dwlstm"), type(model).__module__
        with torch.no_grad():
            tokens[model_type] = {name: model.generate(**batch, **settings).tolist()
                                  for name, settings in searches.items()}
    translator = pipeline("translation", model=folders["translator"], trust_remote_code=True)
    print(json.dumps({"tokens": tokens, "translation": translator(text, num_beams=2, max_new_tokens=6),
                      "pipeline_class": type(translator).__name__}))
""")  # noqa: E501


def test_saved_models_load_and_decode_through_remote_code_alone(tmp_path, translator_parts):
    folders = {}
    for model_type in cases.members():
        cases.tiny_model(model_type).save_pretrained(tmp_path / model_type)
        folders[model_type] = str(tmp_path / model_type)
    model, tokenizer = translator_parts
    model.save_pretrained(tmp_path / "translator")
    tokenizer.save_pretrained(tmp_path / "translator")
    folders["translator"] = str(tmp_path / "translator")
    searches = {
        name: dict(settings, max_new_tokens=cases.MAX_NEW_TOKENS)
        for name, settings in cases.SEARCHES.items()
    }
    batch = {name: value.tolist() for name, value in cases.source_batch().items()}
    environment = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            REMOTE_CODE,
            json.dumps([folders, searches, SENTENCES[0]]),
            json.dumps(batch),
        ],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, f"remote code under {VERSIONS} failed:\n{result.stderr[-3000:]}"
    output = json.loads(result.stdout.strip().splitlines()[-1])
    for model_type in cases.members():
        assert output["tokens"][model_type] == REFERENCE["tokens"][model_type], (
            f"{model_type} through remote code under {VERSIONS}: {output['tokens'][model_type]}, "
            f"reference ({REFERENCE_VERSIONS}): {REFERENCE['tokens'][model_type]}"
        )
    expected = decoded_generate(model, tokenizer, SENTENCES[0], num_beams=2, max_new_tokens=6)
    assert output["pipeline_class"] == "TranslationPipeline"
    assert output["translation"] == [{"translation_text": expected}]
