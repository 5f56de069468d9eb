"""The translate command against generate() on the same batches and against CTranslate2's
translate_file on the model's export (a residual model), one thread each, three interleaved
repetitions (docs/inference.md).

    python examples/translate_speed.py MODEL WORK_DIR LINES SOURCE_FILE
    python examples/translate_speed.py run measure 300 multi30k/test_2016_flickr.en.gz
"""

import gzip
import json
import statistics
import sys
import time
from pathlib import Path

import ctranslate2
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from nmt_toolkit.ctranslate2_export import export_ctranslate2
from nmt_toolkit.evaluation import decode_batches, encode_sources, source_batches
from nmt_toolkit.translate import TranslationArguments, run_translation

torch.set_num_threads(1)
MODEL, WORK, LINES, SOURCE = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
BEAM = 4
lines = gzip.open(SOURCE, "rt", encoding="utf-8").read().splitlines()[:LINES]
WORK.mkdir(parents=True, exist_ok=True)
source = WORK / f"first{LINES}.en"
source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
model = AutoModelForSeq2SeqLM.from_pretrained(MODEL).eval()
tokenizer = AutoTokenizer.from_pretrained(MODEL)

decode_seconds = []


def command():
    """The command's whole run in this process: reading, loading the model, decoding, writing."""
    out = WORK / "command.de"
    start = time.perf_counter()
    summary = run_translation(
        TranslationArguments(
            model=MODEL,
            input=str(source),
            output=str(out),
            overwrite=True,
            quiet=True,
            threads=1,
            num_beams=BEAM,
        )
    )
    decode_seconds.append(summary["seconds"])  # from tokenizing to the renamed output file
    return time.perf_counter() - start, out.read_text(encoding="utf-8").splitlines()


def plain_generate():
    """generate() on the same length-sorted batches, tokenising and detokenising, no files."""
    start = time.perf_counter()
    encoded = encode_sources(tokenizer, lines)
    out = [""] * len(lines)
    for batch, texts in decode_batches(
        model, tokenizer, encoded, source_batches(lines, encoded, 4096), num_beams=BEAM
    ):
        for i, t in zip(batch, texts):
            out[i] = t
    return time.perf_counter() - start, out


ct2_dir = WORK / "ct2"
if not ct2_dir.exists():
    export_ctranslate2(MODEL, str(ct2_dir))
translator = ctranslate2.Translator(str(ct2_dir), device="cpu", inter_threads=1, intra_threads=1)


def ct2_file():
    out = WORK / "ct2.de"
    start = time.perf_counter()
    translator.translate_file(
        str(source),
        str(out),
        max_batch_size=4096,
        batch_type="tokens",
        beam_size=BEAM,
        source_tokenize_fn=lambda text: tokenizer.convert_ids_to_tokens(
            tokenizer(text)["input_ids"]
        ),
        target_detokenize_fn=lambda tokens: tokenizer.decode(
            tokenizer.convert_tokens_to_ids(tokens), skip_special_tokens=True
        ).strip(),
    )
    return time.perf_counter() - start, out.read_text(encoding="utf-8").splitlines()


times = {"command": [], "generate": [], "ct2": []}
outputs = {}
for repeat in range(3):  # interleaved
    for name, function in (("command", command), ("generate", plain_generate), ("ct2", ct2_file)):
        seconds, out = function()
        times[name].append(seconds)
        outputs[name] = out
        print(name, repeat, round(seconds, 2), flush=True)
medians = {name: statistics.median(values) for name, values in times.items()}
report = {
    "lines": LINES,
    "beam": BEAM,
    "threads": 1,
    "seconds": times,
    "median_lines_per_second": {
        name: round(LINES / seconds, 1) for name, seconds in medians.items()
    },
    "command_overhead_vs_generate": round(medians["command"] / medians["generate"] - 1, 4),
    "command_decode_seconds": decode_seconds,
    "command_decoding_overhead_vs_generate": round(
        statistics.median(decode_seconds) / medians["generate"] - 1, 4
    ),
    "command_equals_generate": outputs["command"] == outputs["generate"],
    "ct2_lines_equal_to_command": sum(a == b for a, b in zip(outputs["ct2"], outputs["command"])),
}
print(json.dumps(report, indent=1))
(WORK / f"measure-{LINES}.json").write_text(json.dumps(report, indent=1))
