"""Measure the full-size data path: WMT14 En-De's size through the map-style path, OPUS-100's shape
through streaming.

    PYTHONPATH=. python experiments/scale/measure_data_path.py --data /work/scale-data

Every step runs in a child process under ``/usr/bin/time -v`` while this process samples the child's
whole process tree (its ``num_proc`` workers included) from /proc every 0.25 s: wall time, CPU time
(user + system, children included), the largest single process's peak RSS (``time -v``), the tree's
peak RSS and its peak anonymous memory (RSS without the memory-mapped Arrow files, which the kernel
can drop and read again). The steps use the project's own scripts (the exact commands are recorded);
a few steps wrap a script in `probe` to time its phases (reading, BPE, tokenising, batching, the
first update) by timing the library functions it calls. Results go to ``results.json`` after every
step (a rerun skips the steps already there: delete an entry to redo it) and to ``results.md``.
Synthetic corpora and caches are written under ``--data`` (never into the repository).
"""

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from nmt_toolkit.files import atomic_write_text

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[1]
MULTI30K = Path("/work/shared/data/multi30k")  # this machine's copy; elsewhere --lengths_from
SMALL_MODEL = (
    "d_model=128,ffn_dim=512,encoder_attention_heads=4,decoder_attention_heads=4,encoder_layers=3,"
    "decoder_layers=3"
)


# --- Measuring a child process --------------------------------------------------------------------


def tree_memory(root_pid: int) -> tuple[int, int]:
    """(RSS, anonymous RSS) in bytes, summed over `root_pid` and its descendants."""
    import psutil

    try:
        processes = [psutil.Process(root_pid), *psutil.Process(root_pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    rss = anonymous = 0
    for process in processes:
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{process.pid}/status").read_text()
            fields = dict(re.findall(r"^(VmRSS|RssAnon):\s+(\d+) kB", status, re.M))
            rss += int(fields.get("VmRSS", 0)) * 1024
            anonymous += int(fields.get("RssAnon", 0)) * 1024
    return rss, anonymous


def run_measured(command: list[str], env: dict, log_path: Path) -> dict:
    """Run `command` under /usr/bin/time -v, sampling its process tree's memory; the measurements
    as a dict."""
    peaks = {"rss": 0, "anonymous": 0}
    timeline = []
    start = time.perf_counter()
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            ["/usr/bin/time", "-v", *command],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPOSITORY,
        )

        def sample():
            while child.poll() is None:
                rss, anonymous = tree_memory(child.pid)
                peaks["rss"], peaks["anonymous"] = (
                    max(peaks["rss"], rss),
                    max(peaks["anonymous"], anonymous),
                )
                timeline.append((round(time.perf_counter() - start, 1), round(rss / 2**20)))
                time.sleep(0.25)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = child.wait()
        sampler.join()
    wall = time.perf_counter() - start
    text = log_path.read_text(errors="replace")
    usage = dict(
        re.findall(
            r"^\s*(User time \(seconds\)|System time \(seconds\)|Maximum resident set size "
            r"\(kbytes\)): ([\d.]+)",
            text,
            re.M,
        )
    )
    probe = [
        json.loads(line[len("PROBE ") :]) for line in text.splitlines() if line.startswith("PROBE ")
    ]
    return {
        "exit_code": code,
        "wall_s": round(wall, 1),
        "cpu_s": round(
            float(usage.get("User time (seconds)", 0))
            + float(usage.get("System time (seconds)", 0)),
            1,
        ),
        "max_rss_single_process_mb": round(
            int(usage.get("Maximum resident set size (kbytes)", 0)) / 1024
        ),
        "tree_peak_rss_mb": round(peaks["rss"] / 2**20),
        "tree_peak_anonymous_mb": round(peaks["anonymous"] / 2**20),
        "rss_timeline_mb": timeline[:: max(1, len(timeline) // 60)],
        **({"probe": probe[-1]} if probe else {}),
        **({"log_tail": text[-1500:]} if code else {}),
    }


def machine() -> dict:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(re.findall(r"^([^:\n]+):\s*(.*)$", lscpu, re.M))
    flags = fields.get("Flags", "").split()
    memory = Path("/proc/meminfo").read_text().split("\n")[0]
    return {
        "cpu_model": fields.get("Model name"),
        "cpus": fields.get("CPU(s)"),
        "simd_flags": [flag for flag in flags if flag.startswith(("avx", "amx", "fma", "sse4"))],
        "memory": memory,
        "python": platform.python_version(),
        "uname": platform.release(),
    }


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


# --- Probes: run inside the child, time the phases of a script by the library functions it calls

# (module, attribute) -> phase; a module that imported a function by name is patched there too
PHASES = {
    ("nmt_toolkit.data", "load_parallel_corpus"): "read corpus",
    ("nmt_toolkit.training", "load_parallel_corpus"): "read corpus",
    ("nmt_toolkit.data", "train_corpus_tokenizer"): "BPE",
    ("nmt_toolkit.training", "load_tokenized_split"): "read + tokenise",
    ("nmt_toolkit.training", "check_unknown_tokens"): "unknown-token check",
    ("nmt_toolkit.training", "training_data_fingerprint"): "data fingerprint",
    ("nmt_toolkit.training", "token_lengths"): "batching: lengths",
    ("nmt_toolkit.training", "TokenBatchSampler"): "batching: sampler",
    ("nmt_toolkit.training", "stream_directions"): "stream: directions",
    ("nmt_toolkit.training", "build_model_and_tokenizer"): "model and tokenizer",
}


def install_phase_timers(phases: dict) -> None:
    """Wrap each function of `PHASES` so that its seconds add up in `phases`."""
    import importlib

    for (module_name, attribute), phase in PHASES.items():
        module = importlib.import_module(module_name)
        original = getattr(module, attribute)

        def timed(*args, _original=original, _phase=phase, **kwargs):
            start, cpu = time.perf_counter(), cpu_seconds()
            try:
                return _original(*args, **kwargs)
            finally:
                phases[_phase] = round(phases.get(_phase, 0.0) + time.perf_counter() - start, 1)
                phases[f"{_phase} (CPU)"] = round(
                    phases.get(f"{_phase} (CPU)", 0.0) + cpu_seconds() - cpu, 1
                )

        setattr(module, attribute, timed)


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (the workers of `num_proc`, once
    joined)."""
    import resource

    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def process_age() -> float:
    """Seconds since this process started (Python's own start-up included)."""
    import psutil

    return time.time() - psutil.Process().create_time()


def probe_script(name: str, argv: list[str]) -> None:
    """Run scripts/<name>.py's main in this process with the phase timers, and the first training
    step timed."""
    import importlib.util

    phases: dict = {}
    install_phase_timers(phases)
    result = {"phases_s": phases}
    if name == "train_translation":
        from transformers import TrainerCallback

        from nmt_toolkit.training import parse_training_arguments, train_translation

        class FirstStep(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if "first_step_end_s" not in result:
                    result["first_step_end_s"] = round(process_age(), 1)

        train_translation(*parse_training_arguments(argv), callbacks=[FirstStep()])
    else:
        spec = importlib.util.spec_from_file_location(name, REPOSITORY / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # it imports the (already wrapped) functions by name
        module.main(argv)
    result["process_s"] = round(process_age(), 1)
    print("PROBE " + json.dumps(result), flush=True)


def probe_batching(argv: list[str]) -> None:
    """Token batching over the whole tokenised corpus (read from the cache): time and memory of
    each part."""
    import resource

    import numpy as np

    from nmt_toolkit.batching import TokenBatchSampler
    from nmt_toolkit.training import (
        build_model_and_tokenizer,
        load_tokenized_split,
        parse_training_arguments,
        token_lengths,
    )

    model_args, data_args, _ = parse_training_arguments(argv)
    _, tokenizer = build_model_and_tokenizer(model_args)
    dataset = load_tokenized_split(
        data_args, tokenizer, "train", data_args.dataset, None, data_args.max_length
    )
    result = {"pairs": len(dataset), "rss_before_mb": round(current_rss() / 2**20)}
    start = time.perf_counter()
    sources, targets = token_lengths(dataset)
    result["lengths_s"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    sampler = TokenBatchSampler(sources, targets, data_args.max_tokens, seed=0)
    result["sampler_s"] = round(time.perf_counter() - start, 2)
    result["rss_after_sampler_mb"] = round(current_rss() / 2**20)
    start = time.perf_counter()
    sizes = np.maximum(sources, targets)
    padded = sum(len(batch) * int(sizes[batch].max()) for batch in sampler)
    result.update(
        {
            "epoch_iteration_s": round(time.perf_counter() - start, 2),
            "batches": len(sampler),
            "padding_share": round(1 - int(sizes.sum()) / padded, 4),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        }
    )
    print("PROBE " + json.dumps(result), flush=True)


def current_rss() -> int:
    return tree_memory(os.getpid())[0]


def probe_tokenize_rates(argv: list[str]) -> None:
    """Examples per second of the old tokenisation (the tokenizer's call per batch, then a filter)
    and of `tokenize_pairs` with 1 and 2 processes, on the first pairs of the corpus (caching
    off)."""
    import datasets
    from transformers import AutoTokenizer

    from nmt_toolkit.data import load_parallel_corpus, tokenize_pairs

    folder, tokenizer_path, count = argv[0], argv[1], int(argv[2])
    datasets.disable_caching()
    corpus = load_parallel_corpus(folder, "en", "de").select(range(count)).flatten_indices()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)

    def old():
        def encode(batch):
            return tokenizer(
                [pair["en"] for pair in batch["translation"]],
                text_target=[pair["de"] for pair in batch["translation"]],
            )

        tokenized = corpus.map(encode, batched=True, remove_columns=["translation"])
        return tokenized.filter(
            lambda pair: len(pair["input_ids"]) <= 256 and len(pair["labels"]) <= 256
        )

    result = {"pairs": count}
    for name, run in (
        ("old_path", old),
        ("new_1_process", lambda: tokenize_pairs(corpus, tokenizer, "en", "de")),
        ("new_2_processes", lambda: tokenize_pairs(corpus, tokenizer, "en", "de", num_proc=2)),
    ):
        start, cpu = time.perf_counter(), time.process_time()
        run()
        wall = time.perf_counter() - start
        result[name] = {
            "pairs_per_s": round(count / wall),
            "wall_s": round(wall, 1),
            "cpu_s_this_process": round(time.process_time() - cpu, 1),
        }
    print("PROBE " + json.dumps(result), flush=True)


def probe_bpe_compare(argv: list[str]) -> None:
    """How much the BPE's sample size matters: tokens per sentence on held-out pairs and shared
    vocabulary."""
    from transformers import AutoTokenizer

    from nmt_toolkit.data import load_parallel_corpus

    folder, *tokenizers = argv
    held_out = load_parallel_corpus(folder, "en", "de", split="val")["translation"]
    sentences = [text for pair in held_out for text in pair.values()]
    loaded = {Path(path).name: AutoTokenizer.from_pretrained(path) for path in tokenizers}
    result = {"held_out_sentences": len(sentences)}
    for name, tokenizer in loaded.items():
        ids = tokenizer(sentences)["input_ids"]
        result[name] = {
            "tokens_per_sentence": round(sum(map(len, ids)) / len(ids), 3),
            "vocabulary": len(tokenizer),
            "unknown_tokens": sum(row.count(tokenizer.unk_token_id) for row in ids),
        }
    names = list(loaded)
    for first, second in itertools.combinations(names, 2):
        shared = set(loaded[first].get_vocab()) & set(loaded[second].get_vocab())
        result[f"shared vocabulary {first} / {second}"] = round(len(shared) / len(loaded[first]), 4)
    print("PROBE " + json.dumps(result), flush=True)


def probe_stream(argv: list[str]) -> None:
    """Pull `pairs` pairs of token batches from the stream that train_translation --streaming
    builds; save the position at batch `save_at` with the hashes of the next batches, or resume from
    a saved position and compare."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, required=True)
    parser.add_argument("--save_at", type=int, default=None)
    parser.add_argument("--state", required=True)
    parser.add_argument("--resume", action="store_true")
    args, training_argv = parser.parse_known_args(argv)
    from nmt_toolkit.multilingual import parse_sources
    from nmt_toolkit.training import (
        build_model_and_tokenizer,
        parse_training_arguments,
        training_stream,
    )

    start = time.perf_counter()
    model_args, data_args, training_args = parse_training_arguments(training_argv)
    _, tokenizer = build_model_and_tokenizer(model_args)
    sources = parse_sources(data_args.dataset, data_args.language_pairs)
    stream = training_stream(sources, tokenizer, data_args, training_args, add_language_tag=True)
    result = {
        "setup_s": round(time.perf_counter() - start, 1),
        "directions": sum(len(d) for _, d in sources),
    }
    saved = json.loads(Path(args.state).read_text()) if args.resume else None
    if saved:
        stream.load_state_dict(saved["state"])
    start, pairs, memory, hashes = time.perf_counter(), 0, [], []
    for number, batch in enumerate(stream):
        if number == 0:
            result["first_batch_s"] = round(time.perf_counter() - start, 2)
        if saved and number < len(saved["next_batches"]):
            hashes.append(batch_hash(batch))
        if args.save_at is not None and number == args.save_at:
            state, following = stream.state_dict(), []
        if args.save_at is not None and number > args.save_at and len(following) < 5:
            following.append(batch_hash(batch))
            if len(following) == 5:
                atomic_write_text(
                    args.state,
                    json.dumps(
                        {"state": state, "next_batches": following, "saved_after_batch": number - 5}
                    ),
                )
        pairs += len(batch)
        if number % 100 == 0:
            memory.append(round(current_rss() / 2**20))
        if pairs >= args.pairs and not saved or saved and len(hashes) == len(saved["next_batches"]):
            break
    wall = time.perf_counter() - start
    result.update(
        {
            "pairs": pairs,
            "batches": number + 1,
            "wall_s": round(wall, 1),
            "pairs_per_s": round(pairs / wall),
            "dropped_long": stream.dropped,
            "rss_every_100_batches_mb": memory,
        }
    )
    if saved:
        result["resumed_exactly"] = hashes == saved["next_batches"]
        result["resumed_at_window"] = saved["state"]["window"]
    print("PROBE " + json.dumps(result), flush=True)


def batch_hash(batch: list[dict]) -> str:
    return hashlib.sha256(json.dumps(batch).encode()).hexdigest()[:16]


PROBES = {
    "batching": probe_batching,
    "tokenize_rates": probe_tokenize_rates,
    "bpe_compare": probe_bpe_compare,
    "stream": probe_stream,
}


# --- The plan -------------------------------------------------------------------------------------


def python(*arguments) -> list[str]:
    return [sys.executable, *map(str, arguments)]


def probe(name: str, *arguments) -> list[str]:
    return python(Path(__file__).relative_to(REPOSITORY), "probe", name, *arguments)


def plan(data: Path, scale: float = 1.0, lengths_from: Path = MULTI30K) -> list[dict]:
    """The steps, in order: name, command, the datasets cache it uses (and whether to empty it
    first). `scale` shrinks every count, to try the whole plan quickly."""

    def n(count: int) -> int:
        return max(1, round(count * scale))

    wmt, cache_wmt = data / "wmt14-synthetic", data / "cache-wmt14"
    opus = {size: data / f"opus100-synthetic-{size}" for size in ("2m", "10m")}
    cache_opus = data / "cache-opus"
    tokenizer, tokenizer_small, tokenizer_opus = (
        data / "tok-wmt14-1m",
        data / "tok-wmt14-250k",
        data / "tok-opus",
    )
    train = [
        "--model_name_or_path",
        "hub_configs/dwlstm-base-6l.json",
        "--config_overrides",
        SMALL_MODEL,
        "--tokenizer_name_or_path",
        tokenizer,
        "--dataset",
        wmt,
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--max_tokens",
        4096,
        "--preprocessing_num_workers",
        2,
        "--threads",
        1,
        "--max_steps",
        1,
        "--warmup_steps",
        1,
        "--save_strategy",
        "no",
        "--disable_tqdm",
        "true",
        "--overwrite_output_dir",
    ]
    stream = [
        "--model_name_or_path",
        "hub_configs/dwlstm-base-6l.json",
        "--tokenizer_name_or_path",
        tokenizer_opus,
        "--language_pairs",
        "all",
        "--streaming",
        "--sampling_temperature",
        5,
        "--max_tokens",
        4096,
        "--output_dir",
        data / "runs" / "stream-probe",
    ]
    steps = [
        {
            "name": "generate WMT14-sized corpus",
            "cache": cache_wmt,
            "command": python(
                "scripts/make_synthetic_corpus.py",
                "--output_dir",
                wmt,
                "--train_pairs",
                n(4_500_000),
                "--lengths_from",
                lengths_from,
                "--length_scale",
                2,
                "--length_spread",
                0.35,
                "--formats",
                "text",
                "--overwrite_output_dir",
            ),
        },
        {
            "name": "BPE, 1M-pair sample (cold cache: reads the corpus)",
            "cache": cache_wmt,
            "empty_cache": True,
            "command": probe(
                "script",
                "train_tokenizer",
                "--dataset",
                wmt,
                "--source_lang",
                "en",
                "--target_lang",
                "de",
                "--sample_pairs",
                n(1_000_000),
                "--output_dir",
                tokenizer,
                "--overwrite_output_dir",
            ),
        },
        {
            "name": "BPE, 250k-pair sample",
            "cache": cache_wmt,
            "command": probe(
                "script",
                "train_tokenizer",
                "--dataset",
                wmt,
                "--source_lang",
                "en",
                "--target_lang",
                "de",
                "--sample_pairs",
                n(250_000),
                "--output_dir",
                tokenizer_small,
                "--overwrite_output_dir",
            ),
        },
        {
            "name": "BPE sample sizes compared",
            "cache": cache_wmt,
            "command": probe("bpe_compare", wmt, tokenizer_small, tokenizer),
        },
        {
            "name": "first training step, cold cache",
            "cache": cache_wmt,
            "empty_cache": True,
            "command": probe(
                "script",
                "train_translation",
                *train,
                "--output_dir",
                data / "runs" / "first-step-cold",
            ),
        },
        {
            "name": "first training step, warm cache",
            "cache": cache_wmt,
            "command": probe(
                "script",
                "train_translation",
                *train,
                "--output_dir",
                data / "runs" / "first-step-warm",
            ),
        },
        {
            "name": "token batching over the whole corpus",
            "cache": cache_wmt,
            "command": probe("batching", *train, "--output_dir", data / "runs" / "batching"),
        },
        {
            "name": "tokenisation rates, old and new path (first 100k pairs)",
            "cache": cache_wmt,
            "command": probe("tokenize_rates", wmt, tokenizer, n(100_000)),
        },
    ]
    for size, pairs in (("2m", 2_000_000), ("10m", 10_000_000)):
        steps.append(
            {
                "name": f"generate OPUS-100-shaped corpus, {size}",
                "cache": cache_opus,
                "command": python(
                    "scripts/make_synthetic_corpus.py",
                    "--output_dir",
                    opus[size],
                    "--opus100_shaped",
                    "--train_pairs",
                    n(pairs),
                    "--overwrite_output_dir",
                ),
            }
        )
    steps.append(
        {
            "name": "multilingual BPE (2,000 pairs per direction, T=5)",
            "cache": cache_opus,
            "command": python(
                "scripts/train_tokenizer.py",
                "--dataset",
                opus["2m"],
                "--language_pairs",
                "all",
                "--max_pairs",
                2000,
                "--sampling_temperature",
                5,
                "--output_dir",
                tokenizer_opus,
                "--overwrite_output_dir",
            ),
        }
    )
    state = data / "stream-state-10m.json"
    for size in ("2m", "10m"):
        steps.append(
            {
                "name": f"streaming {size}: 300k pairs of batches (cold: counts the directions)",
                "cache": cache_opus,
                "command": probe(
                    "stream",
                    "--pairs",
                    n(300_000),
                    "--state",
                    data / f"stream-state-{size}.json",
                    "--save_at",
                    n(1000),
                    *stream,
                    "--dataset",
                    opus[size],
                ),
            }
        )
    steps.append(
        {
            "name": "streaming 10m: resume at the saved position",
            "cache": cache_opus,
            "command": probe(
                "stream",
                "--pairs",
                0,
                "--state",
                state,
                "--resume",
                *stream,
                "--dataset",
                opus["10m"],
            ),
        }
    )
    steps.append(
        {
            "name": "streaming 10m: first training step (train_translation --streaming)",
            "cache": cache_opus,
            "command": probe(
                "script",
                "train_translation",
                *stream[:-2],
                "--dataset",
                opus["10m"],
                "--config_overrides",
                SMALL_MODEL,
                "--threads",
                1,
                "--max_steps",
                1,
                "--warmup_steps",
                1,
                "--save_strategy",
                "no",
                "--disable_tqdm",
                "true",
                "--output_dir",
                data / "runs" / "stream-first-step",
                "--overwrite_output_dir",
            ),
        }
    )
    return steps


# --- The report -----------------------------------------------------------------------------------

WMT_STEPS = (
    "BPE, 1M-pair sample (cold cache: reads the corpus)",
    "first training step, cold cache",
    "first training step, warm cache",
    "token batching over the whole corpus",
)


def render_report(results: dict) -> str:
    steps, lines = results["steps"], []
    machine_ = results["machine"]
    avx512 = (
        "" if any(flag.startswith("avx512") for flag in machine_["simd_flags"]) else "; no AVX-512"
    )
    lines += [
        "# The full-size data path, measured",
        "",
        f"Machine: {machine_['cpu_model']}, {machine_['cpus']} cores ("
        f"{', '.join(machine_['simd_flags'])}{avx512}), "
        f"{machine_['memory'].split(':')[1].strip()} memory. {results.get('conditions', '')} CPU "
        "times (user + "
        "system, all processes of the step) are what the work costs; the load columns are the "
        "1-minute load average "
        "before and after each step. Peak RSS is the whole process tree's (workers included), "
        "sampled every 0.25 s; "
        '"anonymous" leaves out the memory-mapped Arrow files. Command: `PYTHONPATH=. python '
        "experiments/scale/measure_data_path.py --data /work/scale-data/full`; each step's exact "
        "command is in "
        "[results.json](results.json).",
        "",
        "| step | wall | CPU | peak RSS | anonymous | load before/after |",
        "|---|---|---|---|---|---|",
    ]
    for name, step in steps.items():
        lines.append(
            f"| {name} | {_duration(step['wall_s'])} | {_duration(step['cpu_s'])} | "
            f"{step['tree_peak_rss_mb']:,} MB | {step['tree_peak_anonymous_mb']:,} MB | "
            f"{step['load_average_before'][0]:.1f} / {step['load_average_after'][0]:.1f} |"
        )
    lines += ["", *_wmt_summary(steps), "", *_stream_summary(steps)]
    missing = [step["name"] for step in plan(Path("DATA")) if step["name"] not in steps]
    if missing:
        lines += [
            "",
            "Not measured yet (run the command above again: it skips the steps already in "
            "results.json):",
            "",
            *(f"- {name}" for name in missing),
        ]
    return "\n".join(lines) + "\n"


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _phase(steps: dict, step: str, phase: str) -> float:
    return steps.get(step, {}).get("probe", {}).get("phases_s", {}).get(phase, 0.0)


def _wmt_summary(steps: dict) -> list[str]:
    if not all(name in steps for name in WMT_STEPS):
        return ["(WMT14-sized steps incomplete.)"]
    bpe, cold, warm, batching = (steps[name] for name in WMT_STEPS)
    read = _phase(steps, WMT_STEPS[1], "read corpus")
    bpe_s = _phase(steps, WMT_STEPS[0], "BPE")
    tokenise = _phase(steps, WMT_STEPS[1], "read + tokenise") - _phase(
        steps, WMT_STEPS[1], "read corpus"
    )
    batch_s = _phase(steps, WMT_STEPS[1], "batching: lengths") + _phase(
        steps, WMT_STEPS[1], "batching: sampler"
    )
    total = read + bpe_s + tokenise + batch_s
    peak = max(bpe["tree_peak_rss_mb"], cold["tree_peak_rss_mb"], batching["tree_peak_rss_mb"])
    probe = batching.get("probe", {})
    return [
        "## WMT14-sized (4.5M pairs), map-style",
        "",
        f"Preprocessing (phases of the runs above): reading the corpus into Arrow {read:.0f} s, "
        f"BPE on the 1M-pair sample {bpe_s:.0f} s, tokenising all pairs (2 processes) "
        f"{tokenise:.0f} s, batching {batch_s:.0f} s: **{total / 60:.1f} min** wall (target 15 "
        f"min: {'met' if total <= 900 else 'not met'}); peak RSS **{peak:,} MB** (target 4 GB: "
        f"{'met' if peak <= 4096 else 'not met'}).",
        f"First training step: cold cache {cold['probe']['first_step_end_s']:.0f} s after the "
        f"process started, warm cache **{warm['probe']['first_step_end_s']:.0f} s** (target 2 "
        f"min: {'met' if warm['probe']['first_step_end_s'] <= 120 else 'not met'}); warm phases: "
        + ", ".join(
            f"{name} {value:.0f} s"
            for name, value in warm["probe"]["phases_s"].items()
            if not name.endswith("(CPU)") and value >= 0.5
        )
        + ".",
        f"Token batching alone: {probe.get('pairs', 0):,} pairs' lengths read in "
        f"{probe.get('lengths_s')} s, the sampler built in {probe.get('sampler_s')} s ("
        f"{probe.get('batches', 0):,} batches, {probe.get('padding_share', 0):.1%} padding), an "
        f"epoch iterated in {probe.get('epoch_iteration_s')} s; RSS {probe.get('rss_before_mb')} "
        f"MB before, {probe.get('rss_after_sampler_mb')} MB after the sampler.",
    ]


def _stream_summary(steps: dict) -> list[str]:
    runs = {
        size: steps.get(
            f"streaming {size}: 300k pairs of batches (cold: counts the directions)", {}
        )
        for size in ("2m", "10m")
    }
    resume = steps.get("streaming 10m: resume at the saved position", {}).get("probe", {})
    if not all(run.get("probe") for run in runs.values()):
        return ["(Streaming steps incomplete.)"]
    lines = [
        "## OPUS-100-shaped (198 directions), streaming",
        "",
        "| corpus | setup | first batch | pairs/s | peak RSS | anonymous | RSS every 100 batches "
        "(MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, run in runs.items():
        probe = run["probe"]
        lines.append(
            f"| {size} pairs | {probe['setup_s']} s | {probe['first_batch_s']} s | "
            f"{probe['pairs_per_s']:,} | {run['tree_peak_rss_mb']:,} MB | "
            f"{run['tree_peak_anonymous_mb']:,} MB | "
            f"{', '.join(map(str, probe['rss_every_100_batches_mb']))} |"
        )
    difference = abs(runs["2m"]["tree_peak_rss_mb"] - runs["10m"]["tree_peak_rss_mb"])
    lines += [
        "",
        f"Peak RSS differs by {difference} MB between 2M and 10M pairs (bounded: "
        f"{'yes' if difference <= 0.05 * runs['2m']['tree_peak_rss_mb'] else 'no'}).",
    ]
    if resume:
        lines.append(
            "Resumed from the position saved after batch 1,000 (window "
            f"{resume.get('resumed_at_window')}): the next 5 batches "
            f"{'equal' if resume.get('resumed_exactly') else 'DIFFER FROM'} the uninterrupted "
            f"run's; first batch after {resume['first_batch_s']} s (setup {resume['setup_s']} s)."
        )
    return lines


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "probe":
        name, arguments = sys.argv[2], sys.argv[3:]
        return (
            probe_script(arguments[0], arguments[1:])
            if name == "script"
            else PROBES[name](arguments)
        )
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, required=True, help="Where corpora, caches and runs are written."
    )
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="Run only the steps whose names contain these words.",
    )
    parser.add_argument("--output", type=Path, default=HERE / "results.json")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="Shrink every count (a quick trial of the plan)."
    )
    parser.add_argument(
        "--lengths_from",
        type=Path,
        default=MULTI30K,
        help=(
            "Multi30k's folder (train.en.gz, train.de.gz): the sentence lengths of the "
            "WMT14-sized corpus."
        ),
    )
    parser.add_argument(
        "--report", action="store_true", help="Only write results.md from results.json."
    )
    parser.add_argument(
        "--conditions",
        default=None,
        help=(
            "What else ran on the machine during the steps (a sentence for the report; kept in "
            "results.json)."
        ),
    )
    args = parser.parse_args()
    results = (
        json.loads(args.output.read_text())
        if args.output.is_file()
        else {"machine": machine(), "steps": {}}
    )
    if args.conditions is not None:
        results["conditions"] = args.conditions
        atomic_write_text(args.output, json.dumps(results, indent=1) + "\n")
    if args.report:
        atomic_write_text(args.output.with_suffix(".md"), render_report(results))
        return
    (args.data / "logs").mkdir(parents=True, exist_ok=True)
    for step in plan(args.data, args.scale, args.lengths_from):
        if step["name"] in results["steps"] or (
            args.only and not any(word in step["name"] for word in args.only)
        ):
            continue
        env = {
            **os.environ,
            "HF_DATASETS_CACHE": str(step["cache"]),
            "PYTHONPATH": str(REPOSITORY),
            "OMP_NUM_THREADS": "1",
            "TRANSFORMERS_VERBOSITY": "warning",
        }
        if step.get("empty_cache"):
            shutil.rmtree(step["cache"], ignore_errors=True)
        command = [str(part) for part in step["command"]]
        print(f"[{time.strftime('%H:%M:%S')}] {step['name']}: {shlex.join(command)}", flush=True)
        load_before = load_average()
        measured = run_measured(
            command, env, args.data / "logs" / (re.sub(r"\W+", "-", step["name"]) + ".log")
        )
        measured.update(
            {
                "command": shlex.join(command).replace(str(REPOSITORY) + "/", ""),
                "load_average_before": load_before,
                "load_average_after": load_average(),
                "started_utc": time.strftime(
                    "%Y-%m-%d %H:%M", time.gmtime(time.time() - measured["wall_s"])
                ),
            }
        )
        results["steps"][step["name"]] = measured
        # a rerun reads it back: never half-written
        atomic_write_text(args.output, json.dumps(results, indent=1) + "\n")
        atomic_write_text(args.output.with_suffix(".md"), render_report(results))
        print(
            "    "
            f"{json.dumps({k: v for k, v in measured.items() if k not in ('rss_timeline_mb', 'command')})[:600]}",  # noqa: E501
            flush=True,
        )
        if measured["exit_code"]:
            sys.exit(f"{step['name']} failed; see {args.data / 'logs'}")


if __name__ == "__main__":
    main()
