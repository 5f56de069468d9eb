"""Nothing lost, nothing mixed up: output folders claimed by one run at a time, inputs never overwritten by their
own outputs, one integrity policy for saved models (checksums and the fingerprint of config and tokenizer),
resuming only the run that was saved, and a full disk said in one line."""

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import MULTI30K, read_multi30k, run_script
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, PreTrainedTokenizerFast, TrainerCallback

from modeling_dwlstm import DwLstmConfig, ResidualTransformerConfig
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.checkpoints import (
    FINGERPRINT_NAME,
    average_checkpoints,
    load_saved_model,
    load_saved_tokenizer,
    record_saved_folder,
)
from nmt_toolkit.ctranslate2_export import export_ctranslate2
from nmt_toolkit.data import load_parallel_corpus, train_corpus_tokenizer
from nmt_toolkit.evaluation import EvaluationArguments, run_evaluation
from nmt_toolkit.files import (
    CHECKSUMS_NAME,
    claim_marker,
    claim_output_dir,
    prepare_output_dir,
    release_output_dir,
)
from nmt_toolkit.lab.experiments import run_experiments
from nmt_toolkit.quickstart import clear_quickstart_output
from nmt_toolkit.training import DataArguments, ModelArguments, TranslationTrainingArguments, train_translation

REPOSITORY = Path(__file__).resolve().parents[1]
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPOSITORY)}
SENTENCES = ["a man rides a horse .", "ein mann reitet ein pferd .", "two dogs play .", "zwei hunde spielen ."] * 5
OTHER_SENTENCES = ["a cat sleeps .", "eine katze schläft .", "three birds sing .", "drei vögel singen ."] * 5
pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k is not at {MULTI30K}")]


def tokenizer_of(sentences, tags=()):
    return train_joint_bpe_tokenizer(sentences, vocab_size=60, language_tags=list(tags))


def save_model(folder: Path, tokenizer, config_class=DwLstmConfig, seed=0, **options) -> Path:
    """A tiny model saved with its tokenizer, fingerprint and manifest, as training leaves a model folder."""
    config = config_class(**tokenizer_model_kwargs(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=2, ffn_dim=16,
                          max_position_embeddings=32, **options)
    torch.manual_seed(seed)
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record_saved_folder(folder)
    return folder


def contents(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def run_script_process(name: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPOSITORY / "scripts" / f"{name}.py"), *map(str, args)],
                          capture_output=True, text=True, env=ENVIRONMENT, timeout=300)


HOLD_CLAIM = ("import sys; from nmt_toolkit.files import claim_output_dir; claim_output_dir(sys.argv[1]); "
              "print('claimed', flush=True); sys.stdin.read()")


@contextlib.contextmanager
def claimed_by_another_run(folder: Path):
    """Another process holding `folder`'s claim, as a run still working there would; yields the process."""
    process = subprocess.Popen([sys.executable, "-c", HOLD_CLAIM, str(folder)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=ENVIRONMENT)
    try:
        assert process.stdout.readline().strip() == "claimed"
        yield process
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny saved bilingual model, with a tokenizer holding a <2de> tag (multilingual evaluation needs one)."""
    tokenizer = tokenizer_of(SENTENCES, ["<2de>"])
    return save_model(tmp_path_factory.mktemp("saved") / "model", tokenizer, language_pairs=["en-de"])


def copy_of(folder: Path, destination: Path) -> Path:
    return Path(shutil.copytree(folder, destination))


# --- Data lost: one run per output folder -------------------------------------------------------------------------

def test_a_second_tokenizer_run_into_a_folder_in_use_is_refused_naming_the_first(tmp_path):
    prepare_output_dir(tmp_path / "tok")  # this process is the first run, still working there
    try:
        second = run_script_process("train_tokenizer", "--dataset", MULTI30K, "--source_lang", "en",
                                    "--target_lang", "de", "--max_pairs", "50", "--merges", "50",
                                    "--output_dir", tmp_path / "tok", "--overwrite_output_dir")
        assert second.returncode == 1, second.stderr[-2000:]
        message = second.stderr.strip().splitlines()[-1]
        assert message.startswith(f"error: Output folder {tmp_path / 'tok'} is in use by another run (pid {os.getpid()}")
        assert str(claim_marker(tmp_path / "tok")) in message and "delete it only if no such run" in message
        assert list((tmp_path / "tok").iterdir()) == [], "the second run wrote nothing"
    finally:
        release_output_dir(tmp_path / "tok")
    assert not claim_marker(tmp_path / "tok").exists(), "released at the end"


def test_a_second_evaluation_is_refused_and_a_killed_runs_claim_is_taken_over(saved, tmp_path):
    (tmp_path / "src.txt").write_text("a man rides .\ntwo dogs .\n")
    (tmp_path / "ref.txt").write_text("ein mann reitet .\nzwei hunde .\n")
    arguments = EvaluationArguments(model=str(saved), output_dir=str(tmp_path / "eval"), num_beams=1, max_new_tokens=3,
                                    source_file=str(tmp_path / "src.txt"), reference_file=str(tmp_path / "ref.txt"),
                                    source_lang="en", target_lang="de", add_language_tag=True)
    with claimed_by_another_run(tmp_path / "eval") as first:
        with pytest.raises(ValueError, match=rf"is in use by another run \(pid {first.pid} on .*: wait until it ends"):
            run_evaluation(arguments)
        assert not (tmp_path / "eval" / "results.json").exists()
        first.send_signal(signal.SIGKILL)  # killed: its marker stays, its lock goes
        first.wait()
        assert claim_marker(tmp_path / "eval").exists()
        results = run_evaluation(arguments)
    assert results["sentences"] == 2 and (tmp_path / "eval" / "results.json").is_file()
    assert not claim_marker(tmp_path / "eval").exists(), "the claim ends with the evaluation"
    run_evaluation(EvaluationArguments(**{**vars(arguments), "overwrite_output_dir": True}))  # the same process again


def test_claims_are_per_process_and_survive_the_folder_being_replaced(tmp_path):
    folder = claim_output_dir(tmp_path / "out")
    assert claim_output_dir(folder) == folder and prepare_output_dir(folder) == folder  # this process, again
    assert claim_marker(folder) == tmp_path / ".out.in-use" and claim_marker(folder).is_file()
    folder.rename(tmp_path / "elsewhere")  # an atomic replacement of the folder keeps the claim beside it
    assert claim_marker(folder).is_file()
    release_output_dir(folder)
    assert not claim_marker(folder).exists()


def test_a_second_campaign_is_refused_before_any_work(tmp_path):
    with claimed_by_another_run(tmp_path / "runs"), pytest.raises(ValueError, match="is in use by another run"):
        run_experiments(REPOSITORY / "experiments" / "multi30k-en-de" / "experiment.json", output_dir=tmp_path / "runs",
                        record_dir=tmp_path / "records", only=["no-such-run"])


# --- Data lost: an output folder that is (or holds) the run's own input -------------------------------------------

def fake_run(run_dir: Path, tokenizer, steps=(3, 6)) -> Path:
    """A finished training run: checkpoints with their training state, and the final model at the top."""
    for step in steps:
        checkpoint = save_model(run_dir / f"checkpoint-{step}", tokenizer, seed=step)
        for name in ("trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
            (checkpoint / name).write_text("{}")
        record_saved_folder(checkpoint)
    save_model(run_dir, tokenizer, seed=steps[-1])
    return run_dir


def test_averaging_into_the_run_folder_itself_is_refused(tmp_path):
    run = fake_run(tmp_path / "run", tokenizer_of(SENTENCES))
    before = contents(run)
    with pytest.raises(ValueError, match=r"output_dir .*run is or holds the checkpoint .*checkpoint-3, an input"):
        run_script("average_checkpoints", "--run_dir", run, "--last", "2", "--output_dir", run,
                   "--overwrite_output_dir")
    with pytest.raises(ValueError, match="is or holds the checkpoint"):
        average_checkpoints([run / "checkpoint-3", run / "checkpoint-6"], run / "checkpoint-6", overwrite=True)
    assert contents(run) == before, "the run's checkpoints, optimizer states and final model are all there"
    run_script("average_checkpoints", "--run_dir", run, "--last", "2", "--output_dir", run / "averaged")
    assert load_saved_model(run / "averaged") is not None


def test_multilingual_evaluation_refuses_to_overwrite_its_own_baseline(saved, tmp_path):
    for language in ("en", "de"):
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data" / f"test.{language}").write_text("a man rides .\ntwo dogs play .\n")
    (tmp_path / "eval" / "en-de").mkdir(parents=True)
    (tmp_path / "eval" / "results.json").write_text(json.dumps({"directions": {"en-de": {"sacrebleu": 12.5}}}))
    (tmp_path / "eval" / "en-de" / "hypotheses.txt").write_text("the baseline's first\nthe baseline's second\n")
    before = contents(tmp_path / "eval")
    arguments = EvaluationArguments(model=str(saved), output_dir=str(tmp_path / "eval"), data=str(tmp_path / "data"),
                                    language_pairs="en-de", baseline_results=str(tmp_path / "eval" / "results.json"),
                                    overwrite_output_dir=True, off_target=False, num_beams=1, max_new_tokens=3,
                                    bootstrap_samples=10)
    with pytest.raises(ValueError, match=r"--baseline_results .*results.json is in the folder this evaluation "
                                         r"writes .*give another --output_dir"):
        run_evaluation(arguments)
    assert contents(tmp_path / "eval") == before


def test_an_evaluation_refuses_to_write_over_its_own_references(saved, tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "hypotheses.txt").write_text("ein mann reitet .\n")  # the references, by an unlucky name
    (tmp_path / "src.txt").write_text("a man rides .\n")
    with pytest.raises(ValueError, match=r"--reference_file .*hypotheses.txt is the file this evaluation writes"):
        run_evaluation(EvaluationArguments(model=str(saved), output_dir=str(tmp_path / "eval"), num_beams=1,
                                           source_file=str(tmp_path / "src.txt"), overwrite_output_dir=True,
                                           reference_file=str(tmp_path / "eval" / "hypotheses.txt")))
    assert (tmp_path / "eval" / "hypotheses.txt").read_text() == "ein mann reitet .\n"


def test_a_tokenizer_is_not_written_over_its_own_corpus(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for language in ("en", "de"):
        (data / f"train.{language}").write_text("\n".join(read_multi30k("train", language, 40)) + "\n")
    before = contents(data)
    with pytest.raises(ValueError, match=r"--output_dir .*data is or holds --dataset .*data, an input of this run"):
        run_script("train_tokenizer", "--dataset", data, "--source_lang", "en", "--target_lang", "de",
                   "--merges", "30", "--output_dir", data, "--overwrite_output_dir")
    assert contents(data) == before


def test_quickstart_overwrite_deletes_only_an_earlier_quickstart(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("years of work")
    (tmp_path / "mine" / "model").mkdir()
    with pytest.raises(ValueError, match=r"also holds thesis.tex, which the quickstart does not write"):
        clear_quickstart_output(tmp_path / "mine")
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "years of work"
    (tmp_path / "earlier" / "model").mkdir(parents=True)
    (tmp_path / "earlier" / "summary.json").write_text("{}")
    clear_quickstart_output(tmp_path / "earlier")
    assert not (tmp_path / "earlier").exists()
    release_output_dir(tmp_path / "earlier")
    release_output_dir(tmp_path / "mine")


# --- One integrity policy: the files a model needs ----------------------------------------------------------------

def test_export_and_loader_verify_the_same_files_and_say_how_to_accept_a_copy(tmp_path):
    pytest.importorskip("ctranslate2")
    trained = save_model(tmp_path / "trained", tokenizer_of(SENTENCES), ResidualTransformerConfig)
    (trained / "trainer_state.json").write_text("{}")
    (trained / "training_args.bin").write_bytes(b"args")
    record_saved_folder(trained)
    copy = copy_of(trained, tmp_path / "copy")
    (copy / "trainer_state.json").unlink()  # copied by hand without the training records
    (copy / "training_args.bin").unlink()
    assert load_saved_model(copy) is not None and len(load_saved_tokenizer(copy)) == 60
    export_ctranslate2(copy, tmp_path / "ct2")
    (copy / "generation_config.json").unlink()  # needed: generate() would silently use other settings
    message = (r"generation_config.json is missing \(listed in checksums.json\) and is needed.*record it so: "
               rf"python scripts/record_checksums.py {copy}")
    with pytest.raises(ValueError, match=message):
        load_saved_model(copy)
    with pytest.raises(ValueError, match=message):
        export_ctranslate2(copy, tmp_path / "ct2-again")
    run_script("record_checksums", copy)  # the override: accept the folder as it is
    export_ctranslate2(copy, tmp_path / "ct2-again")


# --- Silent wrong results: a saved model whose config or tokenizer changed ----------------------------------------

@pytest.mark.parametrize("change, message", [
    ({"encoder_layers": 2}, r"the saved weights do not fit config.json \(\d+ weights missing from the file"),
    ({"model_type": "dwlstm"}, r"the saved weights do not fit config.json"),
    ({"norm_position": "pre"}, r"is not the config the weights were saved with \(norm_position 'post' -> 'pre'\)"),
])
def test_an_edited_config_is_refused_without_a_manifest(tmp_path, change, message):
    folder = save_model(tmp_path / "model", tokenizer_of(SENTENCES), ResidualTransformerConfig)
    (folder / CHECKSUMS_NAME).unlink()
    if "norm_position" not in change:
        (folder / FINGERPRINT_NAME).unlink()  # an old folder: the weights themselves tell
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError, match=message):
        load_saved_model(folder)


def test_another_tokenizer_of_the_same_size_is_refused_without_a_manifest(tmp_path):
    folder = save_model(tmp_path / "model", tokenizer_of(SENTENCES))
    (folder / CHECKSUMS_NAME).unlink()
    other = tokenizer_of(OTHER_SENTENCES)
    assert len(other) == len(tokenizer_of(SENTENCES))
    other.save_pretrained(folder)
    load_saved_model(folder)  # the weights and config are still the saved ones
    with pytest.raises(ValueError, match=r"the tokenizer is not the one the model in .* was saved with"):
        load_saved_tokenizer(folder)
    (folder / FINGERPRINT_NAME).unlink()
    assert len(load_saved_tokenizer(folder)) == 60, "a folder saved before fingerprints loads as before"


# --- Silent wrong results: averaging what is not one model ---------------------------------------------------------

def test_averaging_refuses_another_architecture_another_tokenizer_and_duplicates(tmp_path):
    tokenizer = tokenizer_of(SENTENCES)
    pre = save_model(tmp_path / "pre", tokenizer, ResidualTransformerConfig, seed=1, norm_position="pre")
    post = save_model(tmp_path / "post", tokenizer, ResidualTransformerConfig, seed=2, norm_position="post")
    other = save_model(tmp_path / "other", tokenizer_of(OTHER_SENTENCES), ResidualTransformerConfig, seed=3,
                       norm_position="pre")
    with pytest.raises(ValueError, match=r"post and .*pre are not the same model \(norm_position 'pre' -> 'post'\)"):
        average_checkpoints([pre, post], tmp_path / "avg")
    with pytest.raises(ValueError, match=r"were trained with different tokenizers"):
        average_checkpoints([pre, other], tmp_path / "avg")
    with pytest.raises(ValueError, match=r"hold the same weights \(one checkpoint given twice"):
        average_checkpoints([pre, pre], tmp_path / "avg")
    with pytest.raises(ValueError, match=r"hold the same weights"):
        average_checkpoints([pre, copy_of(pre, tmp_path / "copy")], tmp_path / "avg")
    assert not (tmp_path / "avg").exists()


# --- Training: resuming only the run that was saved, and a full disk ----------------------------------------------

@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A corpus folder that tests may change, its tokenizer and a tiny residual config file."""
    directory = tmp_path_factory.mktemp("setup")
    (directory / "data").mkdir()
    for language in ("en", "de"):
        (directory / "data" / f"train.{language}").write_text("\n".join(read_multi30k("train", language, 24)) + "\n")
    corpus = load_parallel_corpus(MULTI30K, "en", "de", max_pairs=200)
    train_corpus_tokenizer([corpus], ["en", "de"], merges=100).save_pretrained(directory / "tokenizer")
    (directory / "tiny.json").write_text(json.dumps({
        "model_type": "dwlstm-residual", "d_model": 16, "ffn_dim": 16, "encoder_layers": 1, "decoder_layers": 1,
        "encoder_attention_heads": 2, "decoder_attention_heads": 2, "max_position_embeddings": 128}))
    return directory


def arguments(setup, output_dir, **training):
    model_args = ModelArguments(str(setup / "tiny.json"), str(setup / "tokenizer"))
    data_args = DataArguments(dataset=str(setup / "data"), source_lang="en", target_lang="de", max_tokens=160)
    defaults = dict(output_dir=str(output_dir), max_steps=3, save_steps=3, warmup_steps=1, learning_rate=3e-3,
                    logging_steps=1, use_cpu=True, disable_tqdm=True, seed=0)
    return model_args, data_args, TranslationTrainingArguments(**{**defaults, **training})


@pytest.fixture(scope="module")
def trained(setup, tmp_path_factory):
    run = tmp_path_factory.mktemp("trained") / "run"
    train_translation(*arguments(setup, run))
    return run


def resume(setup, run, checkpoint="last", **training):
    training = {"max_steps": 6, **training}
    return train_translation(*arguments(setup, run, resume_from_checkpoint=str(checkpoint), **training))


def test_resuming_after_the_corpus_or_the_config_changed_in_place_is_refused(setup, trained, tmp_path):
    run = copy_of(trained, tmp_path / "run")
    corpus = setup / "data" / "train.de"
    original = corpus.read_text()
    lines = original.splitlines()
    try:
        corpus.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")  # two lines swapped, same size
        with pytest.raises(ValueError, match=r"trained with training_data=24 pairs, token ids sha256 \w+ but this "
                                             r"command gives training_data=24 pairs.*The training corpus \(or the "
                                             r"tokenizer\) changed"):
            resume(setup, run)
    finally:
        corpus.write_text(original)
    config = setup / "tiny.json"
    original = config.read_text()
    try:
        config.write_text(json.dumps({**json.loads(original), "norm_position": "pre"}))  # same shapes
        with pytest.raises(ValueError, match=r"trained with another model_config \(norm_position 'post' -> 'pre'\)"):
            resume(setup, run)
    finally:
        config.write_text(original)
    assert resume(setup, run).state.global_step == 6, "unchanged, it resumes"


def test_resuming_without_the_optimizer_state_the_manifest_or_from_the_run_folder_is_refused(setup, trained, tmp_path):
    run = copy_of(trained, tmp_path / "run")
    checkpoint = run / "checkpoint-3"
    with pytest.raises(ValueError, match=r"run is a run folder, not one of its checkpoints \(its newest: checkpoint-3\)"):
        resume(setup, run, run)
    for name in ("optimizer.pt", "scheduler.pt"):
        (checkpoint / name).unlink()
    with pytest.raises(ValueError, match=r"lacks optimizer.pt, scheduler.pt: resuming would silently restart"):
        resume(setup, run, checkpoint)  # the manifest lists them too, but the manifest may go as well:
    (checkpoint / CHECKSUMS_NAME).unlink()
    with pytest.raises(ValueError, match=r"has no checksums.json, so its files cannot be verified.*record_checksums"):
        resume(setup, run)
    record_saved_folder(checkpoint)
    with pytest.raises(ValueError, match=r"lacks optimizer.pt, scheduler.pt"):
        resume(setup, run)
    assert sorted(path.name for path in run.glob("checkpoint-*")) == ["checkpoint-3"]


def test_overwriting_a_run_refuses_to_delete_the_checkpoint_it_starts_from(setup, trained, tmp_path):
    run = copy_of(trained, tmp_path / "run")
    model_args, data_args, training_args = arguments(setup, run, overwrite_output_dir=True)
    model_args.model_name_or_path, model_args.tokenizer_name_or_path = str(run / "checkpoint-3"), None
    with pytest.raises(ValueError, match=r"--model_name_or_path .*checkpoint-3 is in .*checkpoint-3, which "
                                         r"--overwrite_output_dir deletes"):
        train_translation(model_args, data_args, training_args)
    assert (run / "checkpoint-3" / "model.safetensors").is_file()


class FullDiskAtStep(TrainerCallback):
    """Points checkpoint-N's optimizer.pt at /dev/full just before the Trainer saves it: torch.save fails as it
    does on a full disk (a RuntimeError from its zip writer, not an OSError)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            checkpoint = Path(args.output_dir) / f"checkpoint-{self.step}"
            checkpoint.mkdir()
            (checkpoint / "optimizer.pt").symlink_to("/dev/full")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_while_saving_a_checkpoint_is_one_line_and_resuming_works(setup, tmp_path):
    with pytest.raises(OSError, match=r"No space left on the device while saving step 4 .*checkpoint-2 is intact: "
                                      r"free space, then --resume_from_checkpoint last") as raised:
        train_translation(*arguments(setup, tmp_path / "run", max_steps=4, save_steps=2),
                          callbacks=[FullDiskAtStep(4)])
    assert raised.value.errno == errno.ENOSPC  # what the scripts print as one "error: ..." line
    assert sorted(path.name for path in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-2"]
    trainer = train_translation(*arguments(setup, tmp_path / "run", max_steps=4, save_steps=2,
                                           resume_from_checkpoint="last"))
    assert trainer.state.global_step == 4


def test_resuming_the_last_checkpoint_skips_one_without_its_manifest_and_says_so(setup, trained, tmp_path, caplog):
    run = copy_of(trained, tmp_path / "run")
    train_translation(*arguments(setup, run, max_steps=6, resume_from_checkpoint="last"))
    (run / "checkpoint-6" / CHECKSUMS_NAME).unlink()  # as a run killed while writing it leaves it
    with caplog.at_level("WARNING", logger="nmt_toolkit"):
        trainer = resume(setup, run, max_steps=9)
    assert "Resuming from checkpoint-3: the newer checkpoint-6 has no checksums.json" in caplog.text
    assert trainer.state.global_step == 9


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_while_saving_a_tokenizer_is_one_line_and_a_new_run_works(tmp_path, monkeypatch):
    original = PreTrainedTokenizerFast.save_pretrained

    def onto_a_full_disk(self, directory, *args, **kwargs):
        (Path(directory) / "tokenizer.json").symlink_to("/dev/full")  # the Rust writer fails as on a full disk
        return original(self, directory, *args, **kwargs)

    command = ["train_tokenizer", "--dataset", MULTI30K, "--source_lang", "en", "--target_lang", "de", "--max_pairs",
               "50", "--merges", "30", "--output_dir", tmp_path / "tok"]
    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", onto_a_full_disk)
    with pytest.raises(OSError, match=r"No space left on the device while saving .*tok: free space and run again") \
            as raised:
        run_script(*command)
    assert raised.value.errno == errno.ENOSPC
    assert [path.name for path in tmp_path.iterdir() if path.name != ".tok.in-use"] == ["tok"]
    assert list((tmp_path / "tok").iterdir()) == [], "nothing half-written, no staging folder left"
    monkeypatch.undo()
    run_script(*command)
    assert len(load_saved_tokenizer(tmp_path / "tok")) > 0
    release_output_dir(tmp_path / "tok")


def test_weights_of_another_shape_are_named(tmp_path):
    folder = save_model(tmp_path / "model", tokenizer_of(SENTENCES))
    tensors = load_file(folder / "model.safetensors")
    first = next(iter(tensors))
    tensors[first] = torch.zeros(3, 3)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / CHECKSUMS_NAME).unlink()
    with pytest.raises(ValueError, match=rf"do not fit config.json \(1 of another shape \(e.g. .*{first}"):
        load_saved_model(folder)
