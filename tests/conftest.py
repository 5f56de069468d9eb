"""Tiny configurations of every family member and option, shared by the test files."""

import contextlib
import dataclasses
import functools
import gzip
import importlib.util
import io
import itertools
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

import modeling_dwlstm  # noqa: F401  (registers the Auto classes)
from modeling_dwlstm import (
    DepthWiseRnnConfig,
    DlclConfig,
    DwLstmConfig,
    HighwayTransformerConfig,
    ResidualTransformerConfig,
    ReZeroTransformerConfig,
    TransparentAttentionConfig,
    generation_translation,
    precision,
)
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit import evaluation as evaluation_module
from nmt_toolkit import training
from nmt_toolkit.data import load_parallel_corpus, train_corpus_tokenizer
from nmt_toolkit.evaluation import EvaluationArguments
from nmt_toolkit.files import write_checksums
from nmt_toolkit.lab.speed import MARIAN, BenchmarkSettings
from nmt_toolkit.training import DataArguments, ModelArguments, TranslationTrainingArguments

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
REPOSITORY = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


# Prepended to a subprocess script: from there on the process is like a machine without this
# package, so a model can only load through its remote code.
WITHOUT_PACKAGE = """
import sys
sys.modules["modeling_dwlstm"] = None  # as on a machine without the package (an editable install is global)
try:
    import modeling_dwlstm
    sys.exit("modeling_dwlstm must not be importable here")
except ImportError:
    pass
"""  # noqa: E501


def read_multi30k(split: str, language: str, count: int) -> list[str]:
    """The first `count` sentences of `{split}.{language}.gz` (split: train, val,
    test_2016_flickr)."""
    with gzip.open(MULTI30K / f"{split}.{language}.gz", "rt", encoding="utf-8") as lines:
        return [next(lines).rstrip("\n") for _ in range(count)]


TINY = dict(
    vocab_size=40,
    d_model=16,
    encoder_layers=2,
    decoder_layers=3,
    encoder_attention_heads=2,
    decoder_attention_heads=4,
    ffn_dim=24,
    max_position_embeddings=64,
    dropout=0.0,
)

OPTION_GRID = list(
    itertools.product(
        ("linear", "ffn", "glu"),
        ("global", "per_stack", "none"),
        (False, True),
        ("add", "concat", "two_lstm"),
    )
)

# Every combination of the depth-wise LSTM's options, plus the options outside that grid and the
# baselines.
CASES = {
    f"dwlstm-{hidden}-{gates}-gates-{'shared' if share_hidden else 'own'}-hidden-{merge}": (
        DwLstmConfig,
        {
            "lstm_hidden": hidden,
            "share_gates": gates,
            "share_hidden": share_hidden,
            "decoder_merge": merge,
        },
    )
    for hidden, gates, share_hidden, merge in OPTION_GRID
}
CASES.update(
    {
        "dwlstm": (DwLstmConfig, {}),
        "dwlstm-ffn-tanh": (DwLstmConfig, {"lstm_hidden": "ffn", "lstm_activation": "tanh"}),
        "dwlstm-linear-tanh": (DwLstmConfig, {"lstm_hidden": "linear", "lstm_activation": "tanh"}),
        "dwlstm-learned-positions": (DwLstmConfig, {"position_embedding_type": "learned"}),
        "dwlstm-two-lstm": (DwLstmConfig, {"decoder_merge": "two_lstm"}),
        "residual-post": (ResidualTransformerConfig, {"norm_position": "post"}),
        "residual-pre": (
            ResidualTransformerConfig,
            {"norm_position": "pre", "activation_function": "gelu"},
        ),
        "residual-pre-learned-positions": (
            ResidualTransformerConfig,
            {"norm_position": "pre", "position_embedding_type": "learned"},
        ),
    }
)
# DLCL: each weighting of Wang et al. 2019, Table 6 with each norm, with and without the extra
# LayerNorm; transparent attention.
CASES.update(
    {
        f"dlcl-{norm}-{weights}{'' if layer_norm else '-no-ln'}": (
            DlclConfig,
            {"norm_position": norm, "dlcl_weights": weights, "dlcl_layer_norm": layer_norm},
        )
        for norm, weights, layer_norm in [
            ("pre", "learned", True),
            ("post", "learned", True),
            ("pre", "one", True),
            ("post", "average", True),
            ("pre", "average", False),
            ("post", "one", False),
        ]
    }
)
CASES.update(
    {
        "ta-post": (TransparentAttentionConfig, {"norm_position": "post"}),
        "ta-pre": (TransparentAttentionConfig, {"norm_position": "pre"}),
    }
)

# Highway / SDU: every variant (and both SDU gates), gating every layer or only layer 1 (Chai et al.
# 2020, Tables 5-6).
HIGHWAY_VARIANTS = {
    "sdu-sigmoid": {},
    "sdu-tanh": {"sdu_gate": "tanh"},
    "highway-gate": {"highway_variant": "highway_gate"},
    "gated-mhdpa": {"highway_variant": "gated_mhdpa"},
}
CASES.update(
    {
        f"highway-{variant}-{'all-layers' if layers is None else f'up-to-layer-{layers}'}": (
            HighwayTransformerConfig,
            {**options, "sdu_layers": layers},
        )
        for variant, options in HIGHWAY_VARIANTS.items()
        for layers in (None, 1)
    }
)
# Chai et al. 2020, Table 5's "\\FFN": gates on the attention sub-layers only.
CASES["highway-sdu-attention-only"] = (HighwayTransformerConfig, {"sdu_ffn": False})
# Depth-wise RNN: every combination of its hidden-module options.
CASES.update(
    {
        f"rnn-{hidden}-{'shared' if share_hidden else 'own'}-hidden-{merge}": (
            DepthWiseRnnConfig,
            {"lstm_hidden": hidden, "share_hidden": share_hidden, "decoder_merge": merge},
        )
        for hidden, share_hidden, merge in itertools.product(
            ("linear", "ffn", "glu"), (False, True), ("add", "concat")
        )
    }
)
CASES.update(
    {
        "rezero": (ReZeroTransformerConfig, {}),
        "rezero-gelu": (ReZeroTransformerConfig, {"activation_function": "gelu"}),
    }
)
CASES.update(
    {
        "rnn-linear-tanh": (
            DepthWiseRnnConfig,
            {"lstm_hidden": "linear", "lstm_activation": "tanh"},
        ),
        "rnn-ffn-tanh": (DepthWiseRnnConfig, {"lstm_hidden": "ffn", "lstm_activation": "tanh"}),
    }
)


def run_script(name: str, *argv):
    """Run scripts/<name>.py's main() in this process (the scripts are thin wrappers around the
    package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main([str(arg) for arg in argv])


def tiny_config(case: str, **overrides):
    config_class, options = CASES[case]
    return config_class(**{**TINY, **options, **overrides})


def tiny_model(case: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return AutoModelForSeq2SeqLM.from_config(tiny_config(case, **overrides)).eval()


def train_on_pairs(model, tokenizer, pairs: list, steps: int, wrap: int):
    """`steps` Adam steps (learning rate 3e-3) on batches of 32 (source, target) `pairs` taken in
    turn, the start going back to 0 at `wrap`: the tests' small trained models. Returns the model in
    eval mode."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        batch = pairs[(32 * step) % wrap :][:32]
        loss = model(
            **tokenizer(
                [source for source, _ in batch],
                text_target=[target for _, target in batch],
                return_tensors="pt",
                padding=True,
            )
        ).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def random_ids(
    batch: int, length: int, seed: int = 1, low: int = 3, high: int = 40
) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (batch, length), generator=generator)


@pytest.fixture(scope="session", autouse=True)
def datasets_cache(tmp_path_factory):
    """Local corpora and their tokenisation are cached under the `datasets` cache: the tests' own
    folder, in this process and in the scripts it starts, never the user's."""
    import datasets

    folder = tmp_path_factory.mktemp("datasets-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", folder)
        patch.setenv("HF_DATASETS_CACHE", str(folder))
        yield folder


@pytest.fixture(autouse=True)
def kept_memory_calls(monkeypatch):
    """The translate and evaluate commands, run in this process, keep glibc's allocator settings of
    the test process as they are (`keep_freed_memory` would change them for every later test): each
    call is recorded here instead, and `freed_memory_kept` answers as after it. The calls, for a
    test that asks."""
    calls = []
    monkeypatch.setattr(evaluation_module, "keep_freed_memory", lambda: calls.append(True) or True)
    monkeypatch.setattr(evaluation_module, "freed_memory_kept", lambda: bool(calls))
    return calls


@pytest.fixture
def one_thread():
    """Small models on a shared 2-core machine: several OpenMP threads only wait for each other
    (several times slower under load). Use with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def native_bfloat16(monkeypatch):
    """This CPU as one with native bfloat16, for tests of bfloat16's numbers and of --bf16 training
    (on a CPU without it, bfloat16 is refused as several times slower than float32)."""
    real = precision.cpu_features()
    monkeypatch.setattr(
        precision, "cpu_features", lambda: dataclasses.replace(real, native_bfloat16=True)
    )
    monkeypatch.setattr(training, "cpu_features", precision.cpu_features)


@pytest.fixture(params=sorted(CASES))
def case(request):
    return request.param


def exit_code_as_main(path: Path, *argv) -> int | str | None:
    """Run the script at `path` as `python PATH ARGV` would, in this process (sys.argv swapped for
    the run and put back after): the code it exits with (it must exit)."""
    saved_argv, sys.argv = sys.argv, [str(path), *map(str, argv)]
    try:
        with pytest.raises(SystemExit) as exit_info:
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = saved_argv
    return exit_info.value.code


def run_as_main(name: str, *argv) -> tuple[int, str]:
    """Run scripts/<name>.py as `python scripts/<name>.py ARGV` would, in this process: (exit code,
    stderr)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = exit_code_as_main(SCRIPTS / f"{name}.py", *argv)
    return code, stderr.getvalue()


@functools.cache
def script_help(name: str) -> str:
    """What `python scripts/<name>.py --help` prints, run in this process (the scripts only parse
    arguments before --help exits); cached, so that every test that reads a script's flags
    pays once."""
    path = SCRIPTS / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"scripts/{name}.py does not exist")
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        code = exit_code_as_main(path, "--help")
    assert code in (0, None), f"scripts/{name}.py --help exited with {code}"
    return output.getvalue()


# torch.compile in tests: graphs counted, run as they are


class GraphCounter:
    """A torch.compile backend that runs each captured graph as it is (dynamo's "eager" backend, so
    that the test stays fast) and counts them."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward

    def __deepcopy__(self, memo):  # generate() copies its compile_config: the copy must count here
        return self


@pytest.fixture
def fresh_compiler():
    """Each test's graphs alone (torch.compile keeps a few per function, across models). Under a
    torch that cannot compile decoding steps (torch 2.6 in `make test-compat`; never the main venv)
    the compiled-step tests are skipped: there the refusal is what is tested."""
    if not generation_translation.torch_compile_traces_steps():
        pytest.skip(f"torch {torch.__version__} cannot compile decoding steps (refused, tested)")
    torch._dynamo.reset()


SENTENCES = [
    "a man rides a horse .",
    "ein mann reitet ein pferd .",
    "two dogs play .",
    "zwei hunde spielen .",
] * 5

SIX_SENTENCES = [
    "a man rides a horse .",
    "two dogs play in the snow .",
    "ein mann reitet ein pferd .",
    "zwei hunde spielen im schnee .",
    "a woman reads .",
    "eine frau liest .",
]


def save_model_of_pairs(
    folder: Path, tokenizer, language_pairs: list[str], config_class=DwLstmConfig
) -> Path:
    torch.manual_seed(0)
    config = config_class(
        **tokenizer_model_kwargs(tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=16,
        max_position_embeddings=128,
        language_pairs=language_pairs,
    )
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_checksums(folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A bilingual en-de model (no tags) and a multilingual one with the tags <2de>, <2en>, <2fr>
    (not <2cs>)."""
    folder = tmp_path_factory.mktemp("models")
    texts = {
        language: read_multi30k("train", language, 60) for language in ("en", "de", "fr", "cs")
    }
    every_text = [text for language_texts in texts.values() for text in language_texts]
    bilingual = train_joint_bpe_tokenizer(texts["en"] + texts["de"] + texts["cs"], vocab_size=400)
    tagged = train_joint_bpe_tokenizer(
        every_text, vocab_size=500, language_tags=["<2de>", "<2en>", "<2fr>"]
    )
    return {
        "bilingual": save_model_of_pairs(folder / "bilingual", bilingual, ["en-de"]),
        "multilingual": save_model_of_pairs(
            folder / "multilingual", tagged, ["en-de", "de-en", "en-fr", "fr-en"]
        ),
    }


# the training tests' smallest model, as the config file (`tiny.json`) the training code reads
TINY_TRAINING_MODEL = {
    "model_type": "dwlstm",
    "d_model": 16,
    "ffn_dim": 16,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
}


def write_tiny_training_config(folder: Path, **overrides) -> Path:
    """`folder`/tiny.json: `TINY_TRAINING_MODEL` with `overrides`."""
    path = folder / "tiny.json"
    path.write_text(json.dumps({**TINY_TRAINING_MODEL, **overrides}))
    return path


@pytest.fixture(scope="module")
def multi30k_setup(tmp_path_factory):
    directory = tmp_path_factory.mktemp("setup")
    corpus = load_parallel_corpus(MULTI30K, "en", "de", max_pairs=200)
    train_corpus_tokenizer([corpus], ["en", "de"], merges=100).save_pretrained(
        directory / "tokenizer"
    )
    write_tiny_training_config(directory, max_position_embeddings=128)
    return directory


def tiny_training_arguments(output_dir, **training) -> TranslationTrainingArguments:
    """Three quick CPU steps into `output_dir`, with `training` overriding them."""
    defaults = dict(
        output_dir=str(output_dir),
        max_steps=3,
        save_steps=3,
        warmup_steps=1,
        learning_rate=3e-3,
        logging_steps=1,
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    return TranslationTrainingArguments(**{**defaults, **training})


def multi30k_arguments(multi30k_setup, output_dir, model=None, data=None, **training):
    model_args = ModelArguments(
        str(multi30k_setup / "tiny.json"), str(multi30k_setup / "tokenizer"), **(model or {})
    )
    data_args = DataArguments(
        **{
            "dataset": str(MULTI30K),
            "source_lang": "en",
            "target_lang": "de",
            "max_train_pairs": 24,
            "max_tokens": 160,
            **(data or {}),
        }
    )
    return model_args, data_args, tiny_training_arguments(output_dir, **training)


@pytest.fixture(scope="module")
def saved_with_checksums(tmp_path_factory):
    """A tiny saved model folder (weights, config, tokenizer, checksum manifest) and its
    tokenizer."""
    folder = tmp_path_factory.mktemp("saved") / "model"
    tokenizer = train_joint_bpe_tokenizer(SENTENCES, vocab_size=60)
    config = DwLstmConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=16,
        max_position_embeddings=12,
    )
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_checksums(folder)
    return folder, model, tokenizer


def write_pair(folder: Path, english: str, german: str, split: str = "test") -> Path:
    folder.mkdir(exist_ok=True)
    (folder / f"{split}.en").write_bytes(english.encode("utf-8"))
    (folder / f"{split}.de").write_bytes(german.encode("utf-8"))
    return folder


def tiny_training(tmp_path: Path, output_dir: Path, **training) -> tuple:
    """A one-step training run of a tiny model on two pairs (its tokenizer and data made once under
    `tmp_path`)."""
    data = tmp_path / "data"
    if not data.exists():
        write_pair(data, "a man .\ntwo dogs .\n", "ein mann .\nzwei hunde .\n", "train")
        train_joint_bpe_tokenizer(
            ["a man .", "two dogs .", "ein mann .", "zwei hunde ."], vocab_size=60
        ).save_pretrained(tmp_path / "tokenizer")
        write_tiny_training_config(tmp_path)
    return (
        ModelArguments(str(tmp_path / "tiny.json"), str(tmp_path / "tokenizer")),
        DataArguments(dataset=str(data), source_lang="en", target_lang="de"),
        TranslationTrainingArguments(
            output_dir=str(output_dir), **{"max_steps": 1, "use_cpu": True, **training}
        ),
    )


def write_test_pair(
    folder: Path, english: str = "a man .\ntwo dogs .\n", german: str = "ein mann .\nzwei hunde .\n"
):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.en").write_text(english, encoding="utf-8")
    (folder / "test.de").write_text(german, encoding="utf-8")
    return folder


def evaluation(model, output_dir, **settings) -> EvaluationArguments:
    return EvaluationArguments(
        model=str(model), output_dir=str(output_dir), num_beams=1, max_new_tokens=3, **settings
    )


def run_script_file(name: str, *args: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPOSITORY)}
    return subprocess.run(
        [sys.executable, str(REPOSITORY / "scripts" / name), *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )


def tiny_benchmark_settings(vocab_size: int, **options) -> BenchmarkSettings:
    """A tiny run of the benchmark at the size its test module registers as "tiny" (dwlstm and
    Marian, length 8, float32 and int8, one repeat, no memory probe), with `options` in place of
    any of these."""
    return BenchmarkSettings(
        **{
            **dict(
                sizes=("tiny",),
                lengths=(8,),
                headline_length=8,
                token_budget=64,
                generation_batch=2,
                source_length=5,
                new_tokens=3,
                repeats=1,
                vocab_size=vocab_size,
                members=("dwlstm", MARIAN),
                device="cpu",
                peak_matmul_size=64,
                measure_memory=False,
                precisions=("float32", "int8"),
            ),
            **options,
        }
    )
