"""Does `compile_decoding` pay? Two measurements, each configuration in a process of its own so
that the compile is part of it (torch.compile keeps compiled kernels on disk: an empty
TORCHINDUCTOR_CACHE_DIR for a cold start).

`steps`: a base-size random depth-wise LSTM in each precision, 32 sources of 20 tokens, 24 forced
new tokens; the first compiled beam-4 and greedy decodes (the compile), then eager and compiled
decodes interleaved, medians of `--repeats`:

    PYTHONPATH=. python experiments/speed/round-four/compiled_decoding.py steps \\
        --precisions bfloat16 int8

`evaluation`: the 1,000 English lines of Multi30k's test_2016_flickr translated as
`dwlstm-evaluate` does (`evaluation.decode_batches`: length-sorted batches of 4,096 tokens, beam 4)
by the same model in one precision, with or without compiled steps; the wall time from the model's
preparation to the last batch, compile included. A random model does not know where a sentence
ends, so each hypothesis is ended at the length of its reference (tokenised by the Multi30k
experiment's BPE): every run decodes the steps a trained model of those lengths would.

    PYTHONPATH=. python experiments/speed/round-four/compiled_decoding.py evaluation \\
        --precisions bfloat16 [--compile_decoding]

`graphs`: does compiled decoding stay compiled? One base-size random depth-wise LSTM per
precision, all in one process, each decoding batches of `GRAPH_SHAPES` (sentences, source length)
at beam 4 and greedy with compiled steps: the graphs each precision's model compiled
(torch.compile's count of unique graphs), the seconds it took, and whether any model fell back to
eager steps (its warning, or torch's recompile-limit message in the log):

    PYTHONPATH=. python experiments/speed/round-four/compiled_decoding.py graphs \\
        --precisions float32 bfloat16 int8 bfloat16+int8
"""

import argparse
import statistics
import time
import warnings

import torch
from torch._dynamo.utils import counters
from transformers import LogitsProcessor, LogitsProcessorList

from modeling_dwlstm.precision import prepare_for_inference
from nmt_toolkit.checkpoints import load_saved_tokenizer
from nmt_toolkit.evaluation import decode_batches, encode_sources, source_batches
from nmt_toolkit.files import read_lines
from nmt_toolkit.lab.speed import (
    build_model,
    cpu_identity,
    generate_forced,
    inference_copy,
    random_batch,
)

DATA = "../shared/data/multi30k/test_2016_flickr"
TOKENIZER = "experiments/multi30k-en-de/tokenizer"


class EndAtLength(LogitsProcessor):
    """Forbids the end of sentence before row r's `lengths[r // beams]` new tokens and forces it
    there (rows beyond the batch, compiled decoding's padding copies of its first sentence, take the
    first sentence's length)."""

    def __init__(self, lengths: list[int], beams: int, eos: int, prompt: int = 1):
        self.lengths, self.beams, self.eos, self.prompt = lengths, beams, eos, prompt

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        new = input_ids.shape[1] - self.prompt
        rows = torch.arange(input_ids.shape[0]) // self.beams
        lengths = torch.tensor(self.lengths)[torch.where(rows < len(self.lengths), rows, 0)]
        ending = lengths <= new + 1  # (rows,): the reference's length counts its end of sentence
        scores[ending] = -float("inf")
        scores[:, self.eos] = torch.where(ending, 0.0, -float("inf")).to(scores.dtype)
        return scores


def steps(args):
    model = build_model("dwlstm", "base").eval()
    batch = random_batch(32, 20, 24, model.config.vocab_size)
    for precision in args.precisions:
        copy = inference_copy(model, precision)
        for beams in (4, 1):
            start = time.perf_counter()
            generate_forced(copy, batch, beams, 24, "cpu", compile_decoding=True)
            seconds = time.perf_counter() - start
            print(f"{precision} beam {beams}: first compiled decode {seconds:.1f} s", flush=True)
        times = {}
        for _ in range(args.repeats):
            for beams in (4, 1):
                for compiled in (False, True):
                    start = time.perf_counter()
                    generate_forced(copy, batch, beams, 24, "cpu", compile_decoding=compiled)
                    times.setdefault((beams, compiled), []).append(time.perf_counter() - start)
        for (beams, compiled), seconds in sorted(times.items()):
            print(
                f"{precision} beam {beams} compiled {compiled}: median "
                f"{statistics.median(seconds):.3f} s ({', '.join(f'{s:.3f}' for s in seconds)})",
                flush=True,
            )


def evaluation(args):
    tokenizer = load_saved_tokenizer(TOKENIZER)
    sources = read_lines(f"{DATA}.en.gz")[: args.lines]
    references = read_lines(f"{DATA}.de.gz")[: args.lines]
    reference_lengths = [len(ids) for ids in tokenizer(references)["input_ids"]]
    torch.manual_seed(0)
    model = build_model("dwlstm", "base", vocab_size=len(tokenizer))
    start = time.perf_counter()
    prepare_for_inference(model, precision=args.precisions[0])
    encoded = encode_sources(tokenizer, sources)
    batches = source_batches(sources, encoded, 4096)
    first = None
    for batch in batches:
        processor = EndAtLength(
            [reference_lengths[i] for i in batch], args.num_beams, tokenizer.eos_token_id
        )
        for _ in decode_batches(
            model,
            tokenizer,
            encoded,
            [batch],
            num_beams=args.num_beams,
            logits_processor=LogitsProcessorList([processor]),
            compile_decoding=args.compile_decoding,
        ):
            pass
        first = first or time.perf_counter() - start
    total = time.perf_counter() - start
    print(
        f"precision {args.precisions[0]} beams {args.num_beams} compile_decoding "
        f"{args.compile_decoding}: {len(batches)} batches, first batch {first:.1f} s, all "
        f"{total:.1f} s",
        flush=True,
    )


# (sentences, source length) of the `graphs` measurement: one sentence, buckets below and above 32,
# and source lengths in several buckets of 16
GRAPH_SHAPES = [(1, 9), (7, 20), (32, 20), (100, 35), (3, 50)]


def graphs(args):
    model = build_model("dwlstm", "base").eval()
    for precision in args.precisions:
        copy = inference_copy(model, precision)
        before = counters["stats"]["unique_graphs"]
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for seed, (sentences, length) in enumerate(GRAPH_SHAPES):
                batch = random_batch(sentences, length, 8, model.config.vocab_size, seed=seed)
                for beams in (4, 1):
                    generate_forced(copy, batch, beams, 8, "cpu", compile_decoding=True)
        eager_again = [str(w.message) for w in caught if "eager" in str(w.message).lower()]
        print(
            f"{precision}: {counters['stats']['unique_graphs'] - before} graphs over "
            f"{len(GRAPH_SHAPES)} shapes x 2 searches, {time.perf_counter() - start:.1f} s; "
            f"fell back to eager steps: {eager_again or 'no'}",
            flush=True,
        )
        del copy


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("measurement", choices=("steps", "evaluation", "graphs"))
    parser.add_argument("--precisions", nargs="+", default=["bfloat16"])
    parser.add_argument(
        "--compile_decoding", action="store_true", help="evaluation: compiled steps"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="steps: interleaved repeats")
    parser.add_argument("--num_beams", type=int, default=4, help="evaluation: beams")
    parser.add_argument("--lines", type=int, default=1000, help="evaluation: test lines")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {args}; {cpu_identity()['cpu_flags']}", flush=True)
    {"steps": steps, "evaluation": evaluation, "graphs": graphs}[args.measurement](args)


if __name__ == "__main__":
    main()
