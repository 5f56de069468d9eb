"""What the vocabulary shortlist gains in speed on a trained Multi30k en-de model (its BLEU cost is
measured with scripts/evaluate_translation.py, see README.md): `translate_sentences` over the first
sentences of a split, in batches of at most `max_tokens` source tokens, with and without
`use_shortlist`, float32 and int8, beam 4 and greedy. CPU time of the process, medians, the two
interleaved (steadier than the wall clock on a shared machine).

    PYTHONPATH=. python experiments/shortlist-multi30k/shortlist_multi30k.py MODEL DATA [sentences] [max_tokens] [repeats] [threads]
"""  # noqa: E501

import copy
import os
import statistics
import sys
import time

import torch

from modeling_dwlstm.precision import cpu_features, int8_route, prepare_for_inference
from nmt_toolkit.checkpoints import load_saved_model, load_saved_tokenizer
from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.evaluation import length_sorted_batches, translate_sentences


def main(
    model_dir: str,
    data: str,
    sentences: int = 512,
    max_tokens: int = 512,
    repeats: int = 3,
    threads: int = 1,
):
    torch.set_num_threads(threads)
    tokenizer = load_saved_tokenizer(model_dir)
    model = load_saved_model(model_dir).eval()
    sources = [
        pair["en"]
        for pair in load_parallel_corpus(data, "en", "de", "val", max_pairs=sentences)[
            "translation"
        ]
    ]
    encoded = tokenizer(sources)["input_ids"]
    batches = length_sorted_batches([len(ids) for ids in encoded], max_tokens)
    unions = [
        len(
            model.shortlist.candidates(
                torch.tensor([token for i in batch for token in encoded[i]])[None]
            )
        )
        for batch in batches
    ]
    print(
        f"# {cpu_features().describe()}, int8 route {int8_route()}, {threads} thread(s); "
        f"{model_dir}, first {len(sources)} val sentences in {len(batches)} batches of at most "
        f"{max_tokens} source tokens; shortlist {model.shortlist.metadata}: "
        f"{statistics.mean(unions):.0f} of {model.config.vocab_size} tokens allowed per batch on "
        f"average; CPU-time medians of {repeats}; load average before: {os.getloadavg()}",
        flush=True,
    )
    for precision in ("float32", "int8"):
        prepared = (
            model
            if precision == "float32"
            else prepare_for_inference(copy.deepcopy(model), quantize="int8")
        )
        for beams in (4, 1):
            times = {False: [], True: []}
            outputs = {}
            for repeat in range(repeats + 1):  # the first one warms up
                for restricted in (False, True)[:: 1 if repeat % 2 == 0 else -1]:
                    start = time.process_time()
                    outputs[restricted] = translate_sentences(
                        prepared,
                        tokenizer,
                        sources,
                        num_beams=beams,
                        max_tokens=max_tokens,
                        use_shortlist=restricted,
                    ).hypotheses
                    if repeat:
                        times[restricted].append(time.process_time() - start)
            full, short = statistics.median(times[False]), statistics.median(times[True])
            same = sum(a == b for a, b in zip(outputs[False], outputs[True])) / len(sources)
            print(
                f"{precision} beam {beams}: {full:.2f} s without, {short:.2f} s with the "
                f"shortlist: {full / short:.2f}x the speed; {same:.1%} of the translations "
                "unchanged",
                flush=True,
            )
    print(f"# load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(arg) for arg in sys.argv[3:]))
