"""The decoding step of 2026-11-27 (third pass) against the one before it, int8 base models (fbgemm's route on an
AVX2 CPU), 32 sources of 20 tokens, 24 forced new tokens, beam 4 and greedy, interleaved in one process
(`interleaved_times`: the order rotating), medians. "before" puts the three earlier pieces back:

- beam search's top-k over beams x vocabulary after adding the beam scores to every column (now
  `generation_translation.best_continuations`: each beam's top-k over blocks of columns, `row_topk`);
- SDPA at every decoding step (now `decoding_step_attention` over 256 rows x heads and more);
- fbgemm's input built by torch.cat and its output rescaled, then the bias added (now written in place, and
  `precision.rescaled` in one pass).

With --profile, torch.profiler's top operators of one beam-4 decode of each instead, twice, alternating.

    PYTHONPATH=. python experiments/benchmark/decoding_step_ab.py THREADS REPEATS [--profile]
    # record: decoding_step_ab.txt
"""

import functools
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from modeling_dwlstm import generation_translation, modeling_translation, precision
from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, interleaved_times, random_batch

MEMBERS = ("dwlstm", "residual-prenorm")


def topk_over_beams_times_vocabulary(log_probs, beam_scores, k):
    sentences, beams = beam_scores.shape
    log_probs.view(sentences, beams, -1).add_(beam_scores[:, :, None])
    return torch.topk(log_probs.view(sentences, -1), k)


@functools.cache
def range_rows(in_features: int) -> torch.Tensor:
    """The two rows of +1 and -1 that pinned fbgemm's dynamic range to [-1, 1] before 2026-11-28."""
    return torch.tensor([[1.0], [-1.0]]).expand(2, in_features).contiguous()


def fbgemm_forward_with_cat(self, input):
    rows = input.reshape(-1, self.in_features).float()
    scale = rows.abs().amax(dim=1, keepdim=True).clamp_(min=precision.SMALLEST_SCALE)
    pinned = torch.cat([rows / scale, range_rows(self.in_features)])
    output = torch.ops.quantized.linear_dynamic(pinned, self.packed_weight, True)[:-2].mul_(scale)
    if self.bias is not None:
        output += self.bias
    return output.to(input.dtype).unflatten(0, input.shape[:-1])


NOW = {"best_continuations": generation_translation.best_continuations,
       "DECODING_STEP_MIN_QUERIES": modeling_translation.DECODING_STEP_MIN_QUERIES,
       "forward": precision.FbgemmInt8Projection.forward}
BEFORE = {"best_continuations": topk_over_beams_times_vocabulary, "DECODING_STEP_MIN_QUERIES": 10**12,
          "forward": fbgemm_forward_with_cat}


def use(pieces: dict):
    generation_translation.best_continuations = pieces["best_continuations"]
    modeling_translation.DECODING_STEP_MIN_QUERIES = pieces["DECODING_STEP_MIN_QUERIES"]
    precision.FbgemmInt8Projection.forward = pieces["forward"]


def profiled(member: str, source: dict, rounds: int = 2):
    torch.manual_seed(0)
    model = inference_copy(build_model(member, "base").eval(), "int8")
    for _ in range(rounds):
        for name, pieces in (("before", BEFORE), ("now", NOW)):
            use(pieces)
            generate_forced(model, source, 4, 24, "cpu")
            with profile(activities=[ProfilerActivity.CPU]) as profiler:
                generate_forced(model, source, 4, 24, "cpu")
            events = sorted(profiler.key_averages(), key=lambda event: -event.self_cpu_time_total)
            total = sum(event.self_cpu_time_total for event in events) / 1e6
            print(f"{member}, {name}: {total:.2f} s of operator time; " + ", ".join(
                f"{event.key.split('::')[-1]} {event.self_cpu_time_total / 1e6:.3f} s ({event.count})" for event in events[:9]))


def main(threads: int, repeats: int, profile_only: bool = False):
    torch.set_num_threads(threads)
    source = random_batch(32, 20, 1, 35603, seed=1)
    if profile_only:
        for member in MEMBERS:
            profiled(member, source)
        return
    tasks = {}
    for member in MEMBERS:
        torch.manual_seed(0)
        model = inference_copy(build_model(member, "base").eval(), "int8")
        for beams in (4, 1):
            for name, pieces in (("before", BEFORE), ("now", NOW)):
                tasks[member, beams, name] = (
                    lambda m=model, b=beams, p=pieces: (use(p), generate_forced(m, source, b, 24, "cpu"))[1])
    print_before_now(tasks, repeats, threads)


def print_before_now(tasks: dict, repeats: int, threads: int):
    """Run `tasks` ({(member, beams, "before" or "now"): decode}) once each, then interleaved, and print each pair's
    medians, their ratio and whether they gave the same tokens."""
    outputs = {key: task() for key, task in tasks.items()}  # also the warm-up
    times = interleaved_times(tasks, repeats, "cpu")
    for member, beams in dict.fromkeys(key[:2] for key in tasks):
        before, now = (statistics.median(times[member, beams, name]) for name in ("before", "now"))
        same = torch.equal(outputs[member, beams, "before"], outputs[member, beams, "now"])
        print(f"{member} int8 {'beam 4' if beams == 4 else 'greedy'}, {threads} thread(s): before {before:.3f} s, "
              f"now {now:.3f} s ({before / now:.3f}x); the same tokens {same}; runs before "
              f"{[round(t, 2) for t in times[member, beams, 'before']]}, now {[round(t, 2) for t in times[member, beams, 'now']]}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), "--profile" in sys.argv[3:])
