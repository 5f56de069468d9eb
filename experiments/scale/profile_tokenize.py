"""Where `tokenize_pairs` spends its time: py-spy's samples of the new path (one process, caching off) on the first
pairs of a corpus, summed per function (the share of samples whose stack holds it).

    PYTHONPATH=. py-spy record -r 50 -f raw -o /tmp/tokenize.raw -- python experiments/scale/profile_tokenize.py \\
        CORPUS_FOLDER TOKENIZER 20000
    python experiments/scale/profile_tokenize.py --summarise /tmp/tokenize.raw    # the table in profile_tokenize.txt
    TOKENIZERS_PARALLELISM=false python experiments/scale/profile_tokenize.py --components CORPUS_FOLDER TOKENIZER 20000

`--components` splits the Rust encoding's CPU time by swapping parts of the tokenizer: the BPE model for a word
lookup, then the Metaspace + punctuation pre-tokenizer for a whitespace split.
"""

import collections
import sys
import time


def run(folder: str, tokenizer_path: str, count: int) -> None:
    import datasets
    from transformers import AutoTokenizer

    from nmt_toolkit.data import load_parallel_corpus, tokenize_pairs

    datasets.disable_caching()
    corpus = load_parallel_corpus(folder, "en", "de").select(range(count)).flatten_indices()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    start = time.perf_counter()
    tokenize_pairs(corpus, tokenizer, "en", "de")
    print(f"{count} pairs in {time.perf_counter() - start:.1f} s")


def summarise(path: str) -> None:
    """Of the samples inside `Dataset.map`, the share of each deepest frame of this project or of `datasets` (a
    frame calling into Rust, such as `encode_batch_fast`, shows as the Python line that calls it)."""
    totals, samples = collections.Counter(), 0
    for line in open(path):
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        if not any("_map_single" in frame for frame in frames):
            continue
        samples += int(count)
        own = [frame for frame in frames if "nmt_toolkit" in frame or "datasets/" in frame]
        totals[own[-1] if own else frames[-1]] += int(count)
    print(f"{samples} samples inside Dataset.map")
    for frame, count in totals.most_common(8):
        print(f"{count / samples:6.1%}  {frame}")


def components(folder: str, tokenizer_path: str, count: int) -> None:
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers

    from nmt_toolkit.data import load_parallel_corpus

    sentences = [pair["en"] for pair in load_parallel_corpus(folder, "en", "de").select(range(count))["translation"]]
    tokenizer = Tokenizer.from_file(f"{tokenizer_path}/tokenizer.json")

    def cpu_time() -> float:
        tokenizer.encode_batch_fast(sentences)  # warm the BPE cache as a long run has it
        start = time.process_time()
        tokenizer.encode_batch_fast(sentences)
        return time.process_time() - start

    full = cpu_time()
    vocabulary = json.loads(tokenizer.to_str())["model"]["vocab"]
    tokenizer.model = models.WordLevel(vocabulary, unk_token="<unk>")
    without_bpe = cpu_time()
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    bare = cpu_time()
    print(f"{count} sentences, CPU seconds: whole tokenizer {full:.2f}; BPE model replaced by a word lookup "
          f"{without_bpe:.2f}; and the pre-tokenizer by a whitespace split {bare:.2f}")
    print(f"per sentence: BPE model {(full - without_bpe) / count * 1e6:.0f} us, Metaspace + punctuation "
          f"pre-tokenizer {(without_bpe - bare) / count * 1e6:.0f} us, the rest (normalised strings, encodings, "
          f"Python objects) {bare / count * 1e6:.0f} us")


if __name__ == "__main__":
    if sys.argv[1] == "--summarise":
        summarise(sys.argv[2])
    elif sys.argv[1] == "--components":
        components(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        run(sys.argv[1], sys.argv[2], int(sys.argv[3]))
