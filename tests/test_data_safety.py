"""Nothing lost, nothing mixed up: an overwritten folder holds exactly what a fresh run writes, even
when the run is interrupted; no half-written file is ever read back (written under a temporary name,
renamed when complete); one run per output folder; inputs never overwritten by their own outputs;
saved models checked by their manifest and fingerprint; resuming only the run that was saved; a full
disk said in one line.

A new test of what a run leaves on disk, or reads back from it, goes here."""

import contextlib
import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import (
    MULTI30K,
    REPOSITORY,
    SENTENCES,
    SIX_SENTENCES,
    evaluation,
    multi30k_arguments,
    read_multi30k,
    run_as_main,
    run_script,
    run_script_file,
    save_model_of_pairs,
    tiny_training,
    tiny_training_arguments,
    write_pair,
    write_test_pair,
    write_tiny_training_config,
)
from ctranslate2.specs import model_spec
from hub_server import LoopbackHub
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    Seq2SeqTrainer,
    TrainerCallback,
)

from modeling_dwlstm import DwLstmConfig, ResidualTransformerConfig
from modeling_dwlstm.generation_translation import SHORTLIST_FILE, Shortlist
from modeling_dwlstm.paper_configs import write_hub_configs
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit import onnx_export
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
    atomic_directory,
    atomic_write_json,
    atomic_write_text,
    claim_marker,
    claim_output_dir,
    prepare_output_dir,
    release_output_dir,
    verify_checksums,
    write_checksums,
)
from nmt_toolkit.hub import push_translation_model
from nmt_toolkit.lab.experiments import run_experiments
from nmt_toolkit.quickstart import clear_quickstart_output
from nmt_toolkit.training import (
    DataArguments,
    ModelArguments,
    TokenBatchSeq2SeqTrainer,
    check_steps_left,
    train_translation,
)

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k is not at {MULTI30K}"),
]


ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPOSITORY)}


def run_script_process(name: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPOSITORY / "scripts" / f"{name}.py"), *map(str, args)],
        capture_output=True,
        text=True,
        env=ENVIRONMENT,
        timeout=300,
    )


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A corpus folder that tests may change, its tokenizer and a tiny residual config file."""
    directory = tmp_path_factory.mktemp("setup")
    (directory / "data").mkdir()
    for language in ("en", "de"):
        (directory / "data" / f"train.{language}").write_text(
            "\n".join(read_multi30k("train", language, 24)) + "\n"
        )
    corpus = load_parallel_corpus(MULTI30K, "en", "de", max_pairs=200)
    train_corpus_tokenizer([corpus], ["en", "de"], merges=100).save_pretrained(
        directory / "tokenizer"
    )
    write_tiny_training_config(directory, model_type="dwlstm-residual", max_position_embeddings=128)
    return directory


def arguments(setup, output_dir, **training):
    model_args = ModelArguments(str(setup / "tiny.json"), str(setup / "tokenizer"))
    data_args = DataArguments(
        dataset=str(setup / "data"), source_lang="en", target_lang="de", max_tokens=160
    )
    return model_args, data_args, tiny_training_arguments(output_dir, **training)


HOLD_CLAIM = (
    "import sys; from nmt_toolkit.files import claim_output_dir; claim_output_dir(sys.argv[1]); "
    "print('claimed', flush=True); sys.stdin.read()"
)


@contextlib.contextmanager
def claimed_by_another_run(folder: Path):
    """Another process holding `folder`'s claim, as a run still working there would; yields the
    process."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD_CLAIM, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENVIRONMENT,
    )
    try:
        assert process.stdout.readline().strip() == "claimed"
        yield process
    finally:
        process.kill()
        process.wait()


def save_model(folder: Path, tokenizer, config_class=DwLstmConfig, seed=0, **options) -> Path:
    """A tiny model saved with its tokenizer, fingerprint and manifest, as training leaves a
    model folder."""
    config = config_class(
        **tokenizer_model_kwargs(tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=16,
        max_position_embeddings=32,
        **options,
    )
    torch.manual_seed(seed)
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record_saved_folder(folder)
    return folder


def tokenizer_of(sentences, tags=()):
    return train_joint_bpe_tokenizer(sentences, vocab_size=60, language_tags=list(tags))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny saved bilingual model, with a tokenizer holding a <2de> tag (multilingual evaluation
    needs one)."""
    tokenizer = tokenizer_of(SENTENCES, ["<2de>"])
    return save_model(
        tmp_path_factory.mktemp("saved") / "model", tokenizer, language_pairs=["en-de"]
    )


def contents(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def fake_run(run_dir: Path, tokenizer, steps=(3, 6)) -> Path:
    """A finished training run: checkpoints with their training state, and the final model at
    the top."""
    for step in steps:
        checkpoint = save_model(run_dir / f"checkpoint-{step}", tokenizer, seed=step)
        for name in ("trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
            (checkpoint / name).write_text("{}")
        record_saved_folder(checkpoint)
    save_model(run_dir, tokenizer, seed=steps[-1])
    return run_dir


def copy_of(folder: Path, destination: Path) -> Path:
    return Path(shutil.copytree(folder, destination))


@pytest.fixture(scope="module")
def trained(setup, tmp_path_factory):
    run = tmp_path_factory.mktemp("trained") / "run"
    train_translation(*arguments(setup, run))
    return run


OTHER_SENTENCES = [
    "a cat sleeps .",
    "eine katze schläft .",
    "three birds sing .",
    "drei vögel singen .",
] * 5


def resume(setup, run, checkpoint="last", **training):
    training = {"max_steps": 6, **training}
    return train_translation(
        *arguments(setup, run, resume_from_checkpoint=str(checkpoint), **training)
    )


class FullDiskAtStep(TrainerCallback):
    """Points checkpoint-N's optimizer.pt at /dev/full just before the Trainer saves it: torch.save
    fails as it does on a full disk (a RuntimeError from its zip writer, not an OSError)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            checkpoint = Path(args.output_dir) / f"checkpoint-{self.step}"
            checkpoint.mkdir()
            (checkpoint / "optimizer.pt").symlink_to("/dev/full")


def folder_contents(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def quick_onnx_graphs(monkeypatch, interrupted_at: str | None = None):
    """The ONNX graph writers replaced by ones that write a line (torch.export takes seconds a
    graph): the folder's handling is under test, not the graphs. `interrupted_at`: the graph during
    which Ctrl-C is pressed."""

    def writer(kind):
        def write(model, path, *rest):
            if kind == interrupted_at:
                raise KeyboardInterrupt
            Path(path).write_text(f"new {kind}")

        return write

    monkeypatch.setattr(onnx_export, "export_encoder", writer("encoder"))
    monkeypatch.setattr(onnx_export, "export_decoder_step", writer("decoder"))
    monkeypatch.setattr(
        onnx_export, "quantize_int8", lambda source, target, external: writer("int8")(None, target)
    )


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A tiny saved en-de model with its tokenizer, checksums and fingerprint."""
    tokenizer = train_joint_bpe_tokenizer(SIX_SENTENCES, vocab_size=80)
    torch.manual_seed(0)
    config = DwLstmConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=16,
        max_position_embeddings=64,
        language_pairs=["en-de"],
    )
    folder = tmp_path_factory.mktemp("model") / "model"
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record_saved_folder(folder)
    return folder


def a_training_run(folder: Path, seed: int = 1) -> Path:
    """A folder shaped like a training run: checkpoint-2 with its Trainer state and recorded
    arguments."""
    checkpoint = folder / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (checkpoint / "optimizer.pt").write_bytes(b"hours of work")
    (checkpoint / "run_arguments.json").write_text(
        json.dumps({"seed": seed, "learning_rate": 0.001})
    )
    return folder


def test_a_second_tokenizer_run_into_a_folder_in_use_is_refused_naming_the_first(tmp_path):
    prepare_output_dir(tmp_path / "tok")  # this process is the first run, still working there
    try:
        second = run_script_process(
            "train_tokenizer",
            "--dataset",
            MULTI30K,
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--max_pairs",
            "50",
            "--merges",
            "50",
            "--output_dir",
            tmp_path / "tok",
            "--overwrite_output_dir",
        )
        assert second.returncode == 1, second.stderr[-2000:]
        message = second.stderr.strip().splitlines()[-1]
        assert message.startswith(
            f"error: Output folder {tmp_path / 'tok'} is in use by another run (pid {os.getpid()}"
        )
        assert (
            str(claim_marker(tmp_path / "tok")) in message
            and "delete it only if no such run" in message
        )
        assert list((tmp_path / "tok").iterdir()) == [], "the second run wrote nothing"
    finally:
        release_output_dir(tmp_path / "tok")
    assert not claim_marker(tmp_path / "tok").exists(), "released at the end"


def test_a_second_evaluation_is_refused_and_a_killed_runs_claim_is_taken_over(saved, tmp_path):
    (tmp_path / "src.txt").write_text("a man rides .\ntwo dogs .\n")
    (tmp_path / "ref.txt").write_text("ein mann reitet .\nzwei hunde .\n")
    arguments = EvaluationArguments(
        model=str(saved),
        output_dir=str(tmp_path / "eval"),
        num_beams=1,
        max_new_tokens=3,
        source_file=str(tmp_path / "src.txt"),
        reference_file=str(tmp_path / "ref.txt"),
        source_lang="en",
        target_lang="de",
        add_language_tag=True,
    )
    with claimed_by_another_run(tmp_path / "eval") as first:
        with pytest.raises(
            ValueError,
            match=rf"is in use by another run \(pid {first.pid} on .*: wait until it ends",
        ):
            run_evaluation(arguments)
        assert not (tmp_path / "eval" / "results.json").exists()
        first.send_signal(signal.SIGKILL)  # killed: its marker stays, its lock goes
        first.wait()
        assert claim_marker(tmp_path / "eval").exists()
        results = run_evaluation(arguments)
    assert results["sentences"] == 2 and (tmp_path / "eval" / "results.json").is_file()
    assert not claim_marker(tmp_path / "eval").exists(), "the claim ends with the evaluation"
    # the same process again
    run_evaluation(EvaluationArguments(**{**vars(arguments), "overwrite_output_dir": True}))


def test_claims_are_per_process_and_survive_the_folder_being_replaced(tmp_path):
    folder = claim_output_dir(tmp_path / "out")
    # this process, again
    assert claim_output_dir(folder) == folder and prepare_output_dir(folder) == folder
    assert claim_marker(folder) == tmp_path / ".out.in-use" and claim_marker(folder).is_file()
    # an atomic replacement of the folder keeps the claim beside it
    folder.rename(tmp_path / "elsewhere")
    assert claim_marker(folder).is_file()
    release_output_dir(folder)
    assert not claim_marker(folder).exists()


def test_a_second_campaign_is_refused_before_any_work(tmp_path):
    with (
        claimed_by_another_run(tmp_path / "runs"),
        pytest.raises(ValueError, match="is in use by another run"),
    ):
        run_experiments(
            REPOSITORY / "experiments" / "multi30k-en-de" / "experiment.json",
            output_dir=tmp_path / "runs",
            record_dir=tmp_path / "records",
            only=["no-such-run"],
        )


def test_averaging_into_the_run_folder_itself_is_refused(tmp_path):
    run = fake_run(tmp_path / "run", tokenizer_of(SENTENCES))
    before = contents(run)
    with pytest.raises(
        ValueError, match=r"output_dir .*run is or holds the checkpoint .*checkpoint-3, an input"
    ):
        run_script(
            "average_checkpoints",
            "--run_dir",
            run,
            "--last",
            "2",
            "--output_dir",
            run,
            "--overwrite_output_dir",
        )
    with pytest.raises(ValueError, match="is or holds the checkpoint"):
        average_checkpoints(
            [run / "checkpoint-3", run / "checkpoint-6"], run / "checkpoint-6", overwrite=True
        )
    assert contents(run) == before, (
        "the run's checkpoints, optimizer states and final model are all there"
    )
    run_script(
        "average_checkpoints", "--run_dir", run, "--last", "2", "--output_dir", run / "averaged"
    )
    assert load_saved_model(run / "averaged") is not None


def test_multilingual_evaluation_refuses_to_overwrite_its_own_baseline(saved, tmp_path):
    for language in ("en", "de"):
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data" / f"test.{language}").write_text("a man rides .\ntwo dogs play .\n")
    (tmp_path / "eval" / "en-de").mkdir(parents=True)
    (tmp_path / "eval" / "results.json").write_text(
        json.dumps({"directions": {"en-de": {"sacrebleu": 12.5}}})
    )
    (tmp_path / "eval" / "en-de" / "hypotheses.txt").write_text(
        "the baseline's first\nthe baseline's second\n"
    )
    before = contents(tmp_path / "eval")
    arguments = EvaluationArguments(
        model=str(saved),
        output_dir=str(tmp_path / "eval"),
        data=str(tmp_path / "data"),
        language_pairs="en-de",
        baseline_results=str(tmp_path / "eval" / "results.json"),
        overwrite_output_dir=True,
        off_target=False,
        num_beams=1,
        max_new_tokens=3,
        bootstrap_samples=10,
    )
    with pytest.raises(
        ValueError,
        match=r"--baseline_results .*results.json is in the folder this evaluation "
        r"writes .*give another --output_dir",
    ):
        run_evaluation(arguments)
    assert contents(tmp_path / "eval") == before


def test_an_evaluation_refuses_to_write_over_its_own_references(saved, tmp_path):
    (tmp_path / "eval").mkdir()
    # the references, by an unlucky name
    (tmp_path / "eval" / "hypotheses.txt").write_text("ein mann reitet .\n")
    (tmp_path / "src.txt").write_text("a man rides .\n")
    with pytest.raises(
        ValueError, match=r"--reference_file .*hypotheses.txt is the file this evaluation writes"
    ):
        run_evaluation(
            EvaluationArguments(
                model=str(saved),
                output_dir=str(tmp_path / "eval"),
                num_beams=1,
                source_file=str(tmp_path / "src.txt"),
                overwrite_output_dir=True,
                reference_file=str(tmp_path / "eval" / "hypotheses.txt"),
            )
        )
    assert (tmp_path / "eval" / "hypotheses.txt").read_text() == "ein mann reitet .\n"


def test_a_tokenizer_is_not_written_over_its_own_corpus(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for language in ("en", "de"):
        (data / f"train.{language}").write_text(
            "\n".join(read_multi30k("train", language, 40)) + "\n"
        )
    before = contents(data)
    with pytest.raises(
        ValueError, match=r"--output_dir .*data is or holds --dataset .*data, an input of this run"
    ):
        run_script(
            "train_tokenizer",
            "--dataset",
            data,
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--merges",
            "30",
            "--output_dir",
            data,
            "--overwrite_output_dir",
        )
    assert contents(data) == before


def test_quickstart_overwrite_deletes_only_an_earlier_quickstart(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("years of work")
    (tmp_path / "mine" / "model").mkdir()
    with pytest.raises(
        ValueError, match=r"also holds thesis.tex, which the quickstart does not write"
    ):
        clear_quickstart_output(tmp_path / "mine")
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "years of work"
    (tmp_path / "earlier" / "model").mkdir(parents=True)
    (tmp_path / "earlier" / "summary.json").write_text("{}")
    clear_quickstart_output(tmp_path / "earlier")
    assert not (tmp_path / "earlier").exists()
    release_output_dir(tmp_path / "earlier")
    release_output_dir(tmp_path / "mine")


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
    # needed: generate() would silently use other settings
    (copy / "generation_config.json").unlink()
    message = (
        r"generation_config.json is missing \(listed in checksums.json\) and is needed.*record "
        r"it so: "
        rf"python scripts/record_checksums.py {copy}"
    )
    with pytest.raises(ValueError, match=message):
        load_saved_model(copy)
    with pytest.raises(ValueError, match=message):
        export_ctranslate2(copy, tmp_path / "ct2-again")
    run_script("record_checksums", copy)  # the override: accept the folder as it is
    export_ctranslate2(copy, tmp_path / "ct2-again")


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"encoder_layers": 2},
            r"the saved weights do not fit config.json \(\d+ weights missing from the file",
        ),
        ({"model_type": "dwlstm"}, r"the saved weights do not fit config.json"),
        (
            {"norm_position": "pre"},
            r"is not the config the weights were saved with \(norm_position 'post' -> 'pre'\)",
        ),
    ],
)
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
    with pytest.raises(
        ValueError, match=r"the tokenizer is not the one the model in .* was saved with"
    ):
        load_saved_tokenizer(folder)
    (folder / FINGERPRINT_NAME).unlink()
    assert len(load_saved_tokenizer(folder)) == 60, (
        "a folder saved before fingerprints loads as before"
    )


def test_averaging_refuses_another_architecture_another_tokenizer_and_duplicates(tmp_path):
    tokenizer = tokenizer_of(SENTENCES)
    pre = save_model(
        tmp_path / "pre", tokenizer, ResidualTransformerConfig, seed=1, norm_position="pre"
    )
    post = save_model(
        tmp_path / "post", tokenizer, ResidualTransformerConfig, seed=2, norm_position="post"
    )
    other = save_model(
        tmp_path / "other",
        tokenizer_of(OTHER_SENTENCES),
        ResidualTransformerConfig,
        seed=3,
        norm_position="pre",
    )
    with pytest.raises(
        ValueError, match=r"post and .*pre are not the same model \(norm_position 'pre' -> 'post'\)"
    ):
        average_checkpoints([pre, post], tmp_path / "avg")
    with pytest.raises(ValueError, match=r"were trained with different tokenizers"):
        average_checkpoints([pre, other], tmp_path / "avg")
    with pytest.raises(ValueError, match=r"hold the same weights \(one checkpoint given twice"):
        average_checkpoints([pre, pre], tmp_path / "avg")
    with pytest.raises(ValueError, match=r"hold the same weights"):
        average_checkpoints([pre, copy_of(pre, tmp_path / "copy")], tmp_path / "avg")
    assert not (tmp_path / "avg").exists()


def test_resuming_after_the_corpus_or_the_config_changed_in_place_is_refused(
    setup, trained, tmp_path
):
    run = copy_of(trained, tmp_path / "run")
    corpus = setup / "data" / "train.de"
    original = corpus.read_text()
    lines = original.splitlines()
    try:
        # two lines swapped, same size
        corpus.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")
        with pytest.raises(
            ValueError,
            match=r"trained with training_data=24 pairs, token ids sha256 \w+ but this "
            r"command gives training_data=24 pairs.*The training corpus \(or the "
            r"tokenizer\) changed",
        ):
            resume(setup, run)
    finally:
        corpus.write_text(original)
    config = setup / "tiny.json"
    original = config.read_text()
    try:
        # same shapes
        config.write_text(json.dumps({**json.loads(original), "norm_position": "pre"}))
        with pytest.raises(
            ValueError, match=r"trained with another model_config \(norm_position 'post' -> 'pre'\)"
        ):
            resume(setup, run)
    finally:
        config.write_text(original)
    assert resume(setup, run).state.global_step == 6, "unchanged, it resumes"


def test_resuming_without_the_optimizer_state_the_manifest_or_from_the_run_folder_is_refused(
    setup, trained, tmp_path
):
    run = copy_of(trained, tmp_path / "run")
    checkpoint = run / "checkpoint-3"
    with pytest.raises(
        ValueError,
        match=r"run is a run folder, not one of its checkpoints \(its newest: checkpoint-3\)",
    ):
        resume(setup, run, run)
    for name in ("optimizer.pt", "scheduler.pt"):
        (checkpoint / name).unlink()
    with pytest.raises(
        ValueError, match=r"lacks optimizer.pt, scheduler.pt: resuming would silently restart"
    ):
        # the manifest lists them too, but the manifest may go as well:
        resume(setup, run, checkpoint)
    (checkpoint / CHECKSUMS_NAME).unlink()
    with pytest.raises(
        ValueError,
        match=r"has no checksums.json, so its files cannot be verified.*record_checksums",
    ):
        resume(setup, run)
    record_saved_folder(checkpoint)
    with pytest.raises(ValueError, match=r"lacks optimizer.pt, scheduler.pt"):
        resume(setup, run)
    assert sorted(path.name for path in run.glob("checkpoint-*")) == ["checkpoint-3"]


def test_overwriting_a_run_refuses_to_delete_the_checkpoint_it_starts_from(
    setup, trained, tmp_path
):
    run = copy_of(trained, tmp_path / "run")
    model_args, data_args, training_args = arguments(setup, run, overwrite_output_dir=True)
    model_args.model_name_or_path, model_args.tokenizer_name_or_path = (
        str(run / "checkpoint-3"),
        None,
    )
    with pytest.raises(
        ValueError,
        match=r"--model_name_or_path .*checkpoint-3 is in .*checkpoint-3, which "
        r"--overwrite_output_dir deletes",
    ):
        train_translation(model_args, data_args, training_args)
    assert (run / "checkpoint-3" / "model.safetensors").is_file()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_while_saving_a_checkpoint_is_one_line_and_resuming_works(setup, tmp_path):
    with pytest.raises(
        OSError,
        match=r"No space left on the device while saving step 4 .*checkpoint-2 is intact: "
        r"free space, then --resume_from_checkpoint last",
    ) as raised:
        train_translation(
            *arguments(setup, tmp_path / "run", max_steps=4, save_steps=2),
            callbacks=[FullDiskAtStep(4)],
        )
    assert raised.value.errno == errno.ENOSPC  # what the scripts print as one "error: ..." line
    assert sorted(path.name for path in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-2"]
    trainer = train_translation(
        *arguments(
            setup, tmp_path / "run", max_steps=4, save_steps=2, resume_from_checkpoint="last"
        )
    )
    assert trainer.state.global_step == 4


def test_resuming_the_last_checkpoint_skips_one_without_its_manifest_and_says_so(
    setup, trained, tmp_path, caplog
):
    run = copy_of(trained, tmp_path / "run")
    train_translation(*arguments(setup, run, max_steps=6, resume_from_checkpoint="last"))
    (run / "checkpoint-6" / CHECKSUMS_NAME).unlink()  # as a run killed while writing it leaves it
    with caplog.at_level("WARNING", logger="nmt_toolkit"):
        trainer = resume(setup, run, max_steps=9)
    assert "Resuming from checkpoint-3: the newer checkpoint-6 has no checksums.json" in caplog.text
    assert trainer.state.global_step == 9


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_while_saving_a_tokenizer_is_one_line_and_a_new_run_works(
    tmp_path, monkeypatch
):
    original = PreTrainedTokenizerFast.save_pretrained

    def onto_a_full_disk(self, directory, *args, **kwargs):
        # the Rust writer fails as on a full disk
        (Path(directory) / "tokenizer.json").symlink_to("/dev/full")
        return original(self, directory, *args, **kwargs)

    command = [
        "train_tokenizer",
        "--dataset",
        MULTI30K,
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--max_pairs",
        "50",
        "--merges",
        "30",
        "--output_dir",
        tmp_path / "tok",
    ]
    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", onto_a_full_disk)
    with pytest.raises(
        OSError, match=r"No space left on the device while saving .*tok: free space and run again"
    ) as raised:
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
    with pytest.raises(
        ValueError, match=rf"do not fit config.json \(1 of another shape \(e.g. .*{first}"
    ):
        load_saved_model(folder)


def test_an_overwritten_onnx_export_is_a_fresh_one_even_when_interrupted(
    models, tmp_path, monkeypatch
):
    quick_onnx_graphs(monkeypatch)
    run_script(
        "export_onnx",
        "--model",
        models["bilingual"],
        "--output_dir",
        tmp_path / "fresh",
        "--no_int8",
    )
    old = tmp_path / "old"
    # int8 graphs too
    run_script("export_onnx", "--model", models["bilingual"], "--output_dir", old)
    for graph in old.glob("*.onnx"):
        graph.write_text("old graph")
    before = folder_contents(old)
    quick_onnx_graphs(monkeypatch, interrupted_at="decoder")
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C after the new encoder graph was written
        run_script(
            "export_onnx",
            "--model",
            models["bilingual"],
            "--output_dir",
            old,
            "--overwrite_output_dir",
            "--no_int8",
        )
    assert folder_contents(old) == before, "the old export, whole: no new graph beside old ones"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fresh", "old"], (
        "no staging folder left"
    )
    quick_onnx_graphs(monkeypatch)
    run_script(
        "export_onnx",
        "--model",
        models["bilingual"],
        "--output_dir",
        old,
        "--overwrite_output_dir",
        "--no_int8",
    )
    # no int8 graphs left
    assert folder_contents(old).keys() == folder_contents(tmp_path / "fresh").keys()
    assert json.loads((old / onnx_export.INFO_FILE).read_text())["graphs"].keys() == {"float32"}


def test_an_interrupted_ctranslate2_overwrite_keeps_the_old_export(models, tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(models["bilingual"])
    model = save_model_of_pairs(
        tmp_path / "residual", tokenizer, ["en-de"], ResidualTransformerConfig
    )
    run_script("export_ctranslate2", "--model", model, "--output_dir", tmp_path / "ct2")
    before = folder_contents(tmp_path / "ct2")

    def interrupted(spec, output_dir):  # Ctrl-C while the new model is written
        Path(output_dir, "model.bin").write_bytes(b"half a model")
        raise KeyboardInterrupt

    monkeypatch.setattr(model_spec.ModelSpec, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_script(
            "export_ctranslate2",
            "--model",
            model,
            "--output_dir",
            tmp_path / "ct2",
            "--overwrite_output_dir",
        )
    assert folder_contents(tmp_path / "ct2") == before


def test_an_overwritten_synthetic_corpus_holds_no_file_of_the_old_one(tmp_path):
    small = ["--train_pairs", "20", "--validation_pairs", "0", "--vocabulary_size", "100"]
    run_script(
        "make_synthetic_corpus",
        "--output_dir",
        tmp_path / "corpus",
        *small,
        "--formats",
        "text",
        "jsonl",
    )
    run_script("make_synthetic_corpus", "--output_dir", tmp_path / "fresh", *small, "--seed", "1")
    run_script(
        "make_synthetic_corpus",
        "--output_dir",
        tmp_path / "corpus",
        *small,
        "--seed",
        "1",
        "--overwrite_output_dir",
    )
    assert not (tmp_path / "corpus" / "train.jsonl.gz").exists(), (
        "the readers prefer it to train.{en,de}.gz"
    )
    fresh = folder_contents(tmp_path / "fresh")
    assert folder_contents(tmp_path / "corpus").keys() == fresh.keys()
    assert (
        load_parallel_corpus(tmp_path / "corpus", "en", "de")[:]
        == load_parallel_corpus(tmp_path / "fresh", "en", "de")[:]
    )


def test_a_model_pushed_or_saved_over_another_carries_none_of_its_files(models, tmp_path):
    """Model A with a shortlist, then model B without one, pushed to one Hub repository and saved
    into one folder: A's shortlist.safetensors is gone both times (B would decode over A's
    table)."""
    tokenizer = AutoTokenizer.from_pretrained(models["bilingual"])
    with_shortlist, without = (
        load_saved_model(models["bilingual"]),
        load_saved_model(models["bilingual"]),
    )
    vocabulary = with_shortlist.config.vocab_size
    with_shortlist.shortlist = Shortlist(
        torch.zeros(vocabulary, 1, dtype=torch.long), torch.arange(4)
    )
    with LoopbackHub() as hub:
        for model in (with_shortlist, without):
            push_translation_model(
                model, tokenizer, "user/model", "card", endpoint=hub.endpoint, token="t"
            )
            assert (SHORTLIST_FILE in hub.repos["user/model"]) == (model is with_shortlist)
    for model in (with_shortlist, without):
        model.save_pretrained(tmp_path / "model")
    assert AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "model").shortlist is None


def test_training_over_an_old_run_leaves_nothing_of_it_even_when_interrupted(
    models, tmp_path, monkeypatch
):
    train_translation(*tiny_training(tmp_path, tmp_path / "fresh"))
    run = tmp_path / "run"
    # an old run's final model, its evaluation and a checkpoint
    shutil.copytree(models["bilingual"], run)
    write_pair(run / "test", "old hypothesis\n", "", "hypotheses")
    shutil.copytree(models["bilingual"], run / "checkpoint-9")
    (run / "checkpoint-9" / "trainer_state.json").write_text("{}")
    monkeypatch.setattr(
        Seq2SeqTrainer, "train", lambda *args, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt)
    )
    # Ctrl-C as training starts: the old final model must not stay
    with pytest.raises(KeyboardInterrupt):
        train_translation(*tiny_training(tmp_path, run, overwrite_output_dir=True))
    assert not (run / "model.safetensors").exists() and not (run / "test").exists()
    monkeypatch.undo()
    shutil.copytree(models["bilingual"], run, dirs_exist_ok=True)
    train_translation(*tiny_training(tmp_path, run, overwrite_output_dir=True))
    assert folder_contents(run).keys() == folder_contents(tmp_path / "fresh").keys()


def test_overwriting_refuses_to_empty_a_folder_of_other_runs_or_inputs(
    models, tmp_path, monkeypatch
):
    runs = tmp_path / "runs"
    shutil.copytree(models["bilingual"], runs / "other-run")
    with pytest.raises(
        ValueError,
        match=r"--overwrite_output_dir would delete what .*runs holds, and it holds the "
        r"saved model\(s\) or run\(s\) other-run: move them out",
    ):
        train_translation(*tiny_training(tmp_path, runs, overwrite_output_dir=True))
    monkeypatch.chdir(runs / "other-run")
    with pytest.raises(ValueError, match="the current folder among it"):
        train_translation(*tiny_training(tmp_path, runs / "other-run", overwrite_output_dir=True))
    assert folder_contents(runs / "other-run") == folder_contents(models["bilingual"])


def test_an_overwritten_evaluation_holds_only_the_new_one(models, tmp_path):
    def evaluate(output_dir, pairs, **settings):
        run_evaluation(
            evaluation(
                models["multilingual"],
                output_dir,
                data=str(MULTI30K),
                split="test_2016_flickr",
                max_pairs=2,
                language_pairs=pairs,
                off_target=False,
                **settings,
            )
        )

    evaluate(tmp_path / "fresh", "en-fr")
    evaluate(tmp_path / "eval", "en-de,de-en")
    evaluate(tmp_path / "eval", "en-fr", overwrite_output_dir=True)
    assert folder_contents(tmp_path / "eval").keys() == folder_contents(tmp_path / "fresh").keys()
    with pytest.raises(ValueError, match=r"is or holds --model .*, an input of this run"):
        evaluate(models["multilingual"], "en-fr", overwrite_output_dir=True)
    assert (models["multilingual"] / "model.safetensors").is_file()


def test_an_overwritten_analysis_folder_holds_only_the_new_analysis(models, tmp_path):
    def plot_internals(output_dir, *flags):
        run_script(
            "plot_internals",
            "--model",
            models["bilingual"],
            "--data",
            MULTI30K,
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--split",
            "val",
            "--max_sentences",
            "2",
            "--threads",
            "1",
            "--output_dir",
            output_dir,
            *flags,
        )

    plot_internals(tmp_path / "fresh")
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "gates.json").write_text("{}")  # an earlier analysis's
    plot_internals(tmp_path / "plots", "--overwrite_output_dir")
    assert folder_contents(tmp_path / "plots").keys() == folder_contents(tmp_path / "fresh").keys()
    with pytest.raises(ValueError, match="is or holds --model"):
        plot_internals(models["bilingual"], "--overwrite_output_dir")


def test_a_shortlist_that_cannot_be_written_is_one_line(models, tmp_path, monkeypatch):
    flags = [
        "--model",
        models["bilingual"],
        "--data",
        MULTI30K,
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--max_pairs",
        "20",
    ]
    (tmp_path / "a-file").write_text("")
    code, stderr = run_as_main(
        "build_shortlist", *flags, "--output_dir", tmp_path / "a-file" / "shortlist"
    )
    assert (
        code == 1
        and stderr.startswith("error: Cannot write into ")
        and "a writable folder" in stderr
    ), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr

    # read-only
    for reason, message in (
        ("Permission denied (os error 13)", "Cannot write the shortlist "),
        (
            "No space left on device (os error 28)",
            "No space left on the device while saving the shortlist",
        ),
    ):

        def failing(shortlist, path, reason=reason):  # what safetensors raises, half a file written
            Path(path).write_bytes(b"half")
            raise SafetensorError(f"Error while serializing: I/O error: {reason}")

        monkeypatch.setattr(Shortlist, "save", failing)
        code, stderr = run_as_main("build_shortlist", *flags, "--output_dir", tmp_path / "out")
        assert code == 1 and stderr.startswith(f"error: {message}"), stderr
        assert len(stderr.strip().splitlines()) == 1, stderr
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [], "no partial file left"


def test_an_interrupted_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = atomic_write_text(tmp_path / "results.json", "old")
    monkeypatch.setattr(
        os,
        "fsync",
        lambda descriptor: (_ for _ in ()).throw(OSError(28, "No space left on device")),
    )
    with pytest.raises(OSError):
        atomic_write_text(path, "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_an_interrupted_atomic_directory_leaves_nothing_and_a_replaced_one_stays_whole(tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic_directory(tmp_path / "out") as staging:
        (staging / "half").write_text("x")
        raise KeyboardInterrupt
    assert not list(tmp_path.iterdir())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old").write_text("old")
    with pytest.raises(ValueError, match="already exists"), atomic_directory(tmp_path / "out"):
        pass
    with atomic_directory(tmp_path / "out", replace=True) as staging:
        (staging / "new").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and [
        p.name for p in (tmp_path / "out").iterdir()
    ] == ["new"]


def test_output_folders_are_refused_when_not_empty_and_checked_for_writability(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "hypotheses.txt").write_text("another system\n")
    with pytest.raises(
        ValueError, match=r"run is not empty \(holds hypotheses.txt\).*--overwrite_output_dir"
    ):
        prepare_output_dir(tmp_path / "run")
    assert (tmp_path / "run" / "hypotheses.txt").read_text() == "another system\n"
    assert prepare_output_dir(tmp_path / "run", overwrite=True) == tmp_path / "run"
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is a file"):
        prepare_output_dir(tmp_path / "file")
    with pytest.raises(ValueError, match="Cannot write to output folder .*file/sub"):
        prepare_output_dir(tmp_path / "file" / "sub")


def test_evaluation_refuses_a_folder_with_another_systems_hypotheses_before_loading(
    saved_with_checksums, tmp_path
):
    folder, _, _ = saved_with_checksums
    (tmp_path / "src").write_text("a man .\n")
    (tmp_path / "ref").write_text("ein mann .\n")
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "hypotheses.txt").write_text("baseline\n")
    multi30k_arguments = EvaluationArguments(
        model=str(tmp_path / "no-such-model"),
        output_dir=str(tmp_path / "eval"),
        source_file=str(tmp_path / "src"),
        reference_file=str(tmp_path / "ref"),
    )
    with pytest.raises(ValueError, match="not empty"):
        run_evaluation(multi30k_arguments)
    multi30k_arguments.overwrite_output_dir, multi30k_arguments.baseline_hypotheses = (
        True,
        str(tmp_path / "eval" / "hypotheses.txt"),
    )
    with pytest.raises(
        ValueError, match="is the file this evaluation writes; give another --output_dir"
    ):
        run_evaluation(multi30k_arguments)
    assert (tmp_path / "eval" / "hypotheses.txt").read_text() == "baseline\n"


def test_flipped_bytes_in_the_weights_are_caught_by_the_manifest(saved_with_checksums, tmp_path):
    folder = copy_of(saved_with_checksums[0], tmp_path / "model")
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF  # inside a tensor: safetensors itself would load it
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model.safetensors does not match its checksum"):
        load_saved_model(folder)
    (folder / "config.json").unlink()
    with pytest.raises(ValueError, match=r"config.json is missing"):
        verify_checksums(folder)


@pytest.mark.parametrize(
    "damage, message",
    [
        ("truncated", r"model.safetensors is truncated or corrupted"),
        ("empty", r"model.safetensors is truncated or corrupted"),
        (
            "model_type",
            r"model_type 'dwlstmm' is not a known model type \(this package's: dwlstm, ",
        ),
        ("d_model", r"config.json lacks d_model"),
        ("nan", r"holds NaN or infinite values: training diverged"),
    ],
)
def test_damaged_model_folders_give_one_line_errors(
    saved_with_checksums, tmp_path, damage, message
):
    folder = copy_of(saved_with_checksums[0], tmp_path / "model")
    # a folder saved without a manifest: the other checks still hold
    (folder / CHECKSUMS_NAME).unlink()
    weights, config_path = folder / "model.safetensors", folder / "config.json"
    config = json.loads(config_path.read_text())
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "empty":
        weights.write_bytes(b"")
    elif damage == "model_type":
        config_path.write_text(json.dumps({**config, "model_type": "dwlstmm"}))
    elif damage == "d_model":
        config_path.write_text(json.dumps({k: v for k, v in config.items() if k != "d_model"}))
    else:
        tensors = load_file(weights)
        first = next(iter(tensors))
        tensors[first] = torch.full_like(tensors[first], float("nan"))
        save_file(tensors, weights, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=message):
        load_saved_model(folder)


def test_averaging_verifies_checksums_and_refuses_non_finite_checkpoints(
    saved_with_checksums, tmp_path
):
    first, second = (
        copy_of(saved_with_checksums[0], tmp_path / "checkpoint-1"),
        copy_of(saved_with_checksums[0], tmp_path / "checkpoint-2"),
    )
    # another step
    later = {name: tensor + 0.5 for name, tensor in load_file(second / "model.safetensors").items()}
    save_file(later, second / "model.safetensors", metadata={"format": "pt"})
    write_checksums(second)
    averaged = average_checkpoints([first, second], tmp_path / "avg")
    assert verify_checksums(averaged)
    (second / "tokenizer.json").write_text("{}")
    with pytest.raises(
        ValueError, match=r"checkpoint-2/tokenizer.json does not match its checksum"
    ):
        average_checkpoints([first, second], tmp_path / "avg2")
    tensors = load_file(first / "model.safetensors")
    tensors = {name: tensor * float("inf") for name, tensor in tensors.items()}
    save_file(tensors, first / "model.safetensors", metadata={"format": "pt"})
    write_checksums(first)
    with pytest.raises(ValueError, match="checkpoint-1: .* holds NaN or infinite values"):
        average_checkpoints([first], tmp_path / "avg3")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["avg", "checkpoint-1", "checkpoint-2"]


def test_training_refuses_a_folder_holding_a_finished_model(multi30k_setup, tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"finished model")
    with pytest.raises(
        ValueError, match=r"is not empty \(holds model.safetensors\).*--overwrite_output_dir"
    ):
        train_translation(*multi30k_arguments(multi30k_setup, tmp_path, save_strategy="no"))
    assert (tmp_path / "model.safetensors").read_bytes() == b"finished model"
    with pytest.raises(ValueError, match="give one of them"):
        train_translation(
            *multi30k_arguments(
                multi30k_setup, tmp_path, overwrite_output_dir=True, resume_from_checkpoint="last"
            )
        )


def test_resuming_refuses_changed_settings_and_another_model_size(multi30k_setup, tmp_path):
    train_translation(*multi30k_arguments(multi30k_setup, tmp_path))
    checkpoint = tmp_path / "checkpoint-3"
    assert verify_checksums(checkpoint) and verify_checksums(tmp_path)
    assert (
        "s per update: the remaining 2 updates take about" in (tmp_path / "train.log").read_text()
    )
    with pytest.raises(
        ValueError,
        match=r"trained with max_tokens=160, learning_rate=0.003 but this command gives "
        r"max_tokens=200, learning_rate=0.01",
    ):
        train_translation(
            *multi30k_arguments(
                multi30k_setup,
                tmp_path,
                data={"max_tokens": 200},
                learning_rate=1e-2,
                max_steps=6,
                resume_from_checkpoint="last",
            )
        )
    # A checkpoint without recorded arguments (an older one): the weights' shapes still tell another
    # model size.
    (checkpoint / "run_arguments.json").unlink()
    write_checksums(checkpoint)
    with pytest.raises(
        ValueError, match=r"holds another model size \(\S+ is \(16,\) there, \(32,\) here\)"
    ):
        train_translation(
            *multi30k_arguments(
                multi30k_setup,
                tmp_path,
                model={"config_overrides": "d_model=32,ffn_dim=32"},
                max_steps=6,
                resume_from_checkpoint="last",
            )
        )
    optimizer_state = checkpoint / "optimizer.pt"
    data = bytearray(optimizer_state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    optimizer_state.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"checkpoint-3/optimizer.pt does not match its checksum"):
        train_translation(
            *multi30k_arguments(
                multi30k_setup, tmp_path, max_steps=6, resume_from_checkpoint="last"
            )
        )


def test_a_full_disk_while_saving_says_so_and_names_the_intact_checkpoint(
    multi30k_setup, tmp_path, monkeypatch
):
    original = TokenBatchSeq2SeqTrainer._save_rng_state

    def full_at_step_4(self, output_dir):
        if self.state.global_step == 4:
            raise OSError(28, "No space left on device")
        return original(self, output_dir)

    monkeypatch.setattr(TokenBatchSeq2SeqTrainer, "_save_rng_state", full_at_step_4)
    with pytest.raises(
        OSError, match=r"No space left on the device while saving step 4 .*checkpoint-2 is intact"
    ):
        train_translation(*multi30k_arguments(multi30k_setup, tmp_path, max_steps=4, save_steps=2))
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2"]


def test_tokenizer_and_evaluation_scripts_refuse_non_empty_output_folders(
    saved_with_checksums, tmp_path
):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("mine")
    finished = run_script_file(
        "train_tokenizer.py",
        "--dataset",
        str(MULTI30K),
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--max_pairs",
        "50",
        "--merges",
        "50",
        "--output_dir",
        str(tmp_path / "tok"),
    )
    assert (
        finished.returncode == 1
        and "holds tokenizer.json" in finished.stderr.strip().splitlines()[-1]
    )
    assert (tmp_path / "tok" / "tokenizer.json").read_text() == "mine"


def test_atomic_writes_give_files_and_folders_the_usual_permissions(tmp_path):
    """tempfile makes its files 0600 and folders 0700; what the scripts write must be readable like
    any other file."""
    mask = os.umask(0o022)
    try:
        written = atomic_write_text(tmp_path / "results.json", "{}\n")
        with atomic_directory(tmp_path / "model") as staging:
            (staging / "config.json").write_text("{}")
    finally:
        os.umask(mask)
    assert oct(written.stat().st_mode & 0o777) == oct(0o644)
    assert oct((tmp_path / "model").stat().st_mode & 0o777) == oct(0o755)


def test_files_written_atomically_are_readable_by_the_folders_other_users(tmp_path):
    atomic_write_json(tmp_path / "results.json", {"sacrebleu": 1.0})
    with atomic_directory(tmp_path / "model") as staging:
        (staging / "config.json").write_text("{}")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "results.json").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o777 & ~umask


def test_a_saved_model_is_readable_by_another_user(model):
    for path in (model / "checksums.json", model / "fingerprint.json"):
        assert path.stat().st_mode & stat.S_IROTH, f"{path.name} is readable by its owner only"


def test_replacing_a_folder_that_holds_a_training_run_is_refused(tmp_path):
    run = a_training_run(tmp_path / "run")
    message = (
        r"holds a training run or checkpoint \(checkpoint-2\): --overwrite_output_dir would "
        r"delete it"
    )
    with pytest.raises(ValueError, match=message):
        prepare_output_dir(run, overwrite=True, replaced_whole=True)
    with pytest.raises(
        ValueError, match=r"holds a training run or checkpoint \(trainer_state.json, optimizer.pt\)"
    ):
        with atomic_directory(run / "checkpoint-2", replace=True):
            pass
    assert (run / "checkpoint-2" / "optimizer.pt").read_bytes() == b"hours of work"
    prepare_output_dir(run, overwrite=True)  # writing beside it (an evaluation) is still allowed


def test_a_tokenizer_is_not_written_over_a_training_run(tmp_path):
    run = a_training_run(tmp_path / "run")
    folder = write_test_pair(tmp_path / "data")
    with pytest.raises(ValueError, match=r"holds a training run or checkpoint"):
        run_script(
            "train_tokenizer",
            "--dataset",
            folder,
            "--split",
            "test",
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--merges",
            10,
            "--output_dir",
            run,
            "--overwrite_output_dir",
        )
    assert (run / "checkpoint-2" / "optimizer.pt").is_file()


def test_resuming_a_checkpoint_that_has_max_steps_already_is_refused(tmp_path):
    checkpoint = a_training_run(tmp_path / "run") / "checkpoint-2"
    with pytest.raises(
        ValueError,
        match=r"checkpoint-2: it has 2 updates already, as many as --max_steps 2 or more.*"
        r"Pass a larger --max_steps",
    ):
        check_steps_left(checkpoint, 2)
    check_steps_left(checkpoint, 3)
    check_steps_left(checkpoint, -1)  # by epochs: the Trainer knows


def test_averaging_checkpoints_of_two_runs_is_refused(tmp_path):
    first, second = a_training_run(tmp_path / "seed1"), a_training_run(tmp_path / "seed2", seed=2)
    with pytest.raises(
        ValueError,
        match=r"seed2/checkpoint-2 and .*seed1/checkpoint-2 are checkpoints of different "
        r"training runs \(seed 1 -> 2\)",
    ):
        average_checkpoints([first / "checkpoint-2", second / "checkpoint-2"], tmp_path / "avg")
    assert not (tmp_path / "avg").exists()


def test_hand_edited_presets_are_not_overwritten(tmp_path):
    written = write_hub_configs(tmp_path)
    write_hub_configs(tmp_path)  # the same presets again: nothing to refuse
    preset = tmp_path / "dwlstm-base-6l.json"
    preset.write_text(preset.read_text().replace('"dropout": 0.1', '"dropout": 0.3'))
    with pytest.raises(
        ValueError,
        match=r"holds 1 preset\(s\) that differ from the papers' settings \(e.g. "
        r"dwlstm-base-6l.json, edited by hand\?\): pass --overwrite",
    ):
        write_hub_configs(tmp_path)
    assert '"dropout": 0.3' in preset.read_text()
    assert (
        write_hub_configs(tmp_path, overwrite=True) == written
        and '"dropout": 0.1' in preset.read_text()
    )


def test_building_a_shortlist_again_replaces_the_old_one_only_when_asked(models, tmp_path):
    model = Path(shutil.copytree(models["bilingual"], tmp_path / "model"))
    flags = [
        "--model",
        model,
        "--data",
        MULTI30K,
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--max_pairs",
        "20",
        "--min_count",
        "1",
    ]
    run_script("build_shortlist", *flags)
    first = (model / SHORTLIST_FILE).read_bytes()
    code, stderr = run_as_main("build_shortlist", *flags, "--top_k", "3")
    assert code == 1 and stderr == (
        f"error: {model / SHORTLIST_FILE} exists: pass --overwrite to replace it, or "
        "--output_dir to write the new shortlist elsewhere.\n"
    )
    assert (model / SHORTLIST_FILE).read_bytes() == first
    run_script("build_shortlist", *flags, "--top_k", "3", "--overwrite")
    assert (model / SHORTLIST_FILE).read_bytes() != first and verify_checksums(model, required=True)
