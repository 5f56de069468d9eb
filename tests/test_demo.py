"""The demo page's HTTP API, served in this process and called with gradio_client as a user's
program would: the translation is generate()'s, a direction the model lacks is refused with the
pipeline's own message."""

import os
import runpy
import socket
from pathlib import Path

import gradio_client
import pytest
import torch
from test_translate import save_model

from modeling_dwlstm.precision import fastest_precision, prepare_for_inference
from nmt_toolkit.demo import UNNAMED_DIRECTION, DemoTranslator, build_demo, model_directions

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no telemetry calls from the tests

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "The small dog bought a happy child."


@pytest.fixture(scope="module")
def corpus():
    from nmt_toolkit.quickstart_corpus import generate_pairs

    return [english for english, _ in generate_pairs(200, seed=3)]


@pytest.fixture(scope="module")
def models(corpus, tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo")
    save_model(folder / "en-de", corpus, language_pairs=["en-de"])
    save_model(folder / "m2m", corpus, tags=["<2de>", "<2fr>"], language_pairs=["en-de", "en-fr"])
    save_model(folder / "unnamed", corpus)
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def served(folder):
    """The page of the model in `folder`, served on a free local port, and a client of its API."""
    demo = build_demo(str(folder))
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return demo, gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)


def generated(folder, text, num_beams, tag=None, precision="float32"):
    """What generate() gives for `text` with the saved model's generation config (the pipeline's
    settings), the model prepared for `precision`."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model, tokenizer = (
        prepare_for_inference(AutoModelForSeq2SeqLM.from_pretrained(folder), precision=precision),
        AutoTokenizer.from_pretrained(folder),
    )
    ids = tokenizer(text)["input_ids"]
    if tag is not None:
        ids = [tokenizer.convert_tokens_to_ids(f"<2{tag}>"), *ids]
    with torch.no_grad():
        output = model.generate(input_ids=torch.tensor([ids]), num_beams=num_beams)
    return tokenizer.decode(output[0], skip_special_tokens=True).strip()


def test_the_page_offers_the_models_directions(models):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    def directions(name):
        folder = models / name
        return model_directions(
            AutoModelForSeq2SeqLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
        )

    assert directions("en-de").pairs == ["en-de"] and not directions("en-de").multilingual
    m2m = directions("m2m")
    assert m2m.multilingual and m2m.sources == ["de", "en", "fr"] and m2m.targets == ["de", "fr"]
    assert directions("unnamed").pairs == [UNNAMED_DIRECTION]


def test_a_bilingual_page_translates_as_generate_and_refuses_another_direction(models):
    demo, client = served(models / "en-de")
    try:
        translation, seconds = client.predict(TEXT, "en-de", 2, api_name="/translate")
        assert translation == generated(models / "en-de", TEXT, 2) and seconds.endswith(" s")
        with pytest.raises(
            Exception, match=r"Unsupported direction de to en: this model translates \['en-de'\]"
        ):
            client.predict(TEXT, "de-en", 2, api_name="/translate")
    finally:
        demo.close()


def test_a_multilingual_page_takes_both_languages(models):
    demo, client = served(models / "m2m")
    try:
        translation, _ = client.predict(TEXT, "en", "fr", 3, api_name="/translate")
        assert translation == generated(models / "m2m", TEXT, 3, tag="fr")
        with pytest.raises(Exception, match="Unsupported target language 'cs'"):
            client.predict(TEXT, "en", "cs", 3, api_name="/translate")
    finally:
        demo.close()


def test_the_space_app_and_the_command_take_the_model_from_model_id(models, monkeypatch, capsys):
    import gradio

    from nmt_toolkit.cli import exit_on_error
    from nmt_toolkit.commands.demo import main

    app = Path(__file__).resolve().parents[1] / "space" / "app.py"
    monkeypatch.delenv("MODEL_ID", raising=False)
    with pytest.raises(SystemExit, match="set MODEL_ID"):
        runpy.run_path(str(app))
    with pytest.raises(SystemExit):
        exit_on_error(main, [])
    assert (
        capsys.readouterr().err.strip()
        == "error: Give the model: --model FOLDER_OR_HUB_ID, or set MODEL_ID."
    )
    monkeypatch.setenv("MODEL_ID", str(models / "en-de"))
    assert isinstance(runpy.run_path(str(app))["demo"], gradio.Blocks)  # what the Space launches


def page_heading(demo) -> str:
    import gradio

    return next(block.value for block in demo.blocks.values() if isinstance(block, gradio.Markdown))


def test_the_page_decodes_in_the_precision_it_is_given(models):
    fastest = fastest_precision()
    translator = DemoTranslator(str(models / "en-de"), precision="auto")
    assert translator.precision == fastest
    assert translator.pipeline.model.inference_precision == fastest
    translation, _ = translator.translate_direction(TEXT, "en-de", 2)
    assert translation == generated(models / "en-de", TEXT, 2, precision="auto")
    folder = str(models / "en-de")
    assert page_heading(build_demo(folder)).endswith("(float32)")
    assert page_heading(build_demo(folder, precision="auto")).endswith(f"({fastest})")


def test_the_command_and_the_space_refuse_an_unknown_precision(models, monkeypatch, capsys):
    from nmt_toolkit.commands.demo import main

    with pytest.raises(SystemExit):
        main(["--model", str(models / "en-de"), "--precision", "fp16"])
    assert "--precision: invalid choice: 'fp16'" in capsys.readouterr().err
    monkeypatch.setenv("PRECISION", "fp16")
    with pytest.raises(ValueError, match=r"PRECISION must be auto or one of float32, .*got .fp16."):
        main(["--model", str(models / "en-de")])
    app = Path(__file__).resolve().parents[1] / "space" / "app.py"
    monkeypatch.setenv("MODEL_ID", str(models / "en-de"))
    monkeypatch.setenv("PRECISION", "fp16")
    with pytest.raises(SystemExit, match=r"PRECISION must be auto or one of float32, .*got 'fp16'"):
        runpy.run_path(str(app))
    monkeypatch.setenv("PRECISION", "auto")
    assert page_heading(runpy.run_path(str(app))["demo"]).endswith(f"({fastest_precision()})")
