"""Are CTranslate2's int8 products faster than fbgemm's on this CPU? The same architecture on both sides (our
residual pre-norm base and Marian base: d 512, 6+6 layers, d_ff 2,048, 35,603 words, random weights), the same
int8 beam-4 decode of 32 sources of 20 tokens with 24 forced new tokens, one thread, each side in its own process
sampled by `perf record` (cpu-clock). Samples are grouped by the native symbol they fall in: int8 matrix
products (fbgemm's kernels on our side; oneDNN / MKL / CTranslate2's own on the other), everything else.

    PYTHONPATH=. python experiments/benchmark/int8_engines_perf.py [decodes]   # needs perf; quiet machine
    # record: int8_engines_perf_avx2.txt (AVX2)

Each side decodes once to warm up, then `decodes` times; the setup (model building, conversion, warm-up) runs
before perf attaches, so the samples are the timed decodes only.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from modeling_dwlstm.precision import cpu_features, int8_route
from nmt_toolkit.ctranslate2_export import convert_loaded
from nmt_toolkit.lab.benchmark import (
    MARIAN,
    build_model,
    generate_forced,
    inference_copy,
    random_batch,
    random_words_tokenizer,
    translate_forced,
)

VOCABULARY, SOURCES, SOURCE_LENGTH, NEW_TOKENS, BEAMS = 35603, 32, 20, 24, 4
# Native symbols by what they do, first match wins. oneDNN names its generated kernels through perf's map file
# (ONEDNN_JIT_PROFILE=2); fbgemm's (asmjit) stay unnamed, and on our side only fbgemm generates code, so an unnamed
# generated kernel is an int8 product. Quantising the activations and rescaling the int32 results is a group of its
# own on both sides; attention's float products (and any other float matrix work) another.
SYMBOL_GROUPS = (
    ("quantisation around the int8 products", re.compile(
        r"quantize_s8|dequantize_gemm_output|fbgemm::(Quantize|requantize|FindMinMax|ChooseQuantizationParams)|"
        r"quantize_per_tensor|choose_qparams", re.IGNORECASE)),
    ("int8 products", re.compile(r"^0x[0-9a-f]+$|s8u8s32|u8s8s32|_u8_|_s8_|fbgemm", re.IGNORECASE)),
    ("attention and float products", re.compile(r"f32|sgemv|sgemm|xsgemm|flash_attention|mkl_blas|gemm", re.IGNORECASE)),
)
GROUPS = [name for name, _ in SYMBOL_GROUPS] + ["everything else"]
SIDES = ("ours", "ctranslate2")


def ready(decode, decodes: int):
    """Warm up, tell the parent to attach perf, wait for it, then time `decodes` calls (seconds, printed)."""
    decode()
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.perf_counter()
    for _ in range(decodes):
        decode()
    print(f"seconds {time.perf_counter() - started:.3f}", flush=True)
    sys.stdin.readline()  # perf stops before the interpreter's shutdown (its garbage collection) is sampled


def side(name: str, decodes: int):
    torch.set_num_threads(1)
    source = random_batch(SOURCES, SOURCE_LENGTH, 1, VOCABULARY, seed=1)
    if name == "ours":
        torch.manual_seed(0)
        model = inference_copy(build_model("residual-prenorm", "base", VOCABULARY).eval(), "int8")
        print(f"route {int8_route()}", flush=True)
        ready(lambda: generate_forced(model, source, BEAMS, NEW_TOKENS, "cpu"), decodes)
        return
    import ctranslate2

    torch.manual_seed(0)
    model = build_model(MARIAN, "base", VOCABULARY).eval()
    with tempfile.TemporaryDirectory() as directory:
        path = convert_loaded(model, random_words_tokenizer(VOCABULARY, pad_last=True), str(Path(directory) / "marian"))
        translator = ctranslate2.Translator(path, device="cpu", compute_type="int8", intra_threads=1, inter_threads=1)
        tokens = [[f"w{i}" for i in row] for row in source["input_ids"].tolist()]
        ready(lambda: translate_forced(translator, tokens, BEAMS, NEW_TOKENS), decodes)


def profile_side(name: str, decodes: int, directory: Path) -> dict:
    """Run one side in a child process under perf; its seconds per decode and the grouped samples."""
    # oneDNN writes /tmp/perf-<pid>.map for its generated kernels (2: Linux perf), so perf names them
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "CT2_VERBOSE": "1", "ONEDNN_JIT_PROFILE": "2",
                   "DNNL_JIT_PROFILE": "2"}
    child = subprocess.Popen([sys.executable, __file__, "--side", name, str(decodes)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    lines = []
    while (line := child.stdout.readline()) and line.strip() != "ready":
        lines.append(line.strip())
    if not line:
        raise RuntimeError(f"the {name} side stopped before decoding: {child.stderr.read()[-2000:]}")
    data = directory / f"{name}.perf.data"
    perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "999", "-p", str(child.pid), "-o", str(data)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # perf attached before the decodes start
    child.stdin.write("go\n")
    child.stdin.flush()
    while (line := child.stdout.readline()) and not line.startswith("seconds"):
        lines.append(line.strip())
    perf.send_signal(signal.SIGINT)
    perf.wait()
    output, errors = child.communicate("stop\n")
    seconds = float(line.split()[1])
    shares, symbols, libraries = grouped_samples(data)
    Path(f"/tmp/perf-{child.pid}.map").unlink(missing_ok=True)
    backend = [line for line in (lines + errors.splitlines()) if "route" in line or "CT2" in line or "backend" in line.lower()]
    return {"seconds_per_decode": seconds / decodes, "shares": shares, "top": symbols.most_common(12),
            "everything else by library": libraries.most_common(6), "notes": backend}


def grouped_samples(data: Path) -> tuple[Counter, Counter, Counter]:
    """perf's samples in `data` as percentages: by group (`GROUPS`), by symbol, and the last group by library."""
    report = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "dso,symbol",
                             "--percent-limit", "0"], capture_output=True, text=True, check=True).stdout
    shares, symbols, libraries = Counter(), Counter(), Counter()
    for match in re.finditer(r"^\s+([0-9.]+)%\s+(\[JIT\] tid \d+|\S+)\s+\[.\]\s+(.+?)\s*(-\s+-)?$", report,
                             re.MULTILINE):
        percent, library, symbol = float(match.group(1)), match.group(2), match.group(3).strip()
        if library.startswith("[JIT]"):  # code generated at run time
            library, symbol = "[JIT]", symbol if not symbol.startswith("0x") else "0x0 (unnamed kernels)"
        group = next((name for name, pattern in SYMBOL_GROUPS if pattern.search(symbol.split(" ")[0])),
                     "everything else")
        shares[group] += percent
        symbols[f"{library}: {symbol[:90]}"] += percent
        if group == "everything else":
            libraries[library] += percent
    return shares, symbols, libraries


def main(decodes: int = 5):
    print(f"# PYTHONPATH=. python experiments/benchmark/int8_engines_perf.py {decodes}   "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    print(f"# {cpu_features().describe()}; 1 thread; beam {BEAMS}, {SOURCES} sources x {SOURCE_LENGTH} tokens, "
          f"{NEW_TOKENS} new tokens; {decodes} decodes per side after one warm-up")
    results = {}
    with tempfile.TemporaryDirectory() as directory:
        for name in SIDES:
            results[name] = profile_side(name, decodes, Path(directory))
    for name, result in results.items():
        total = result["seconds_per_decode"]
        print(f"\n{name}: {total:.3f} s per decode")
        for group in GROUPS:
            print(f"  {group}: {result['shares'][group]:.1f}% = {result['shares'][group] / 100 * total:.3f} s")
        for note in result["notes"]:
            print(f"  note: {note}")
        for symbol, percent in result["top"]:
            print(f"  {percent:5.1f}%  {symbol}")
        print("  everything else, by library: " + ", ".join(
            f"{library} {percent / 100 * total:.3f} s" for library, percent in result["everything else by library"]))
    ours, theirs = results["ours"], results["ctranslate2"]
    print(f"\nours / CTranslate2, time for the same work (above 1: ours is slower): whole decode "
          f"{ours['seconds_per_decode'] / theirs['seconds_per_decode']:.2f}x")
    for group in GROUPS:
        mine, its = (side["shares"][group] / 100 * side["seconds_per_decode"] for side in (ours, theirs))
        print(f"  {group}: {mine:.3f} s against {its:.3f} s ({mine / its:.2f}x)" if its else f"  {group}: {mine:.3f} s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--side":
        side(sys.argv[2], int(sys.argv[3]))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
