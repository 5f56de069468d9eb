"""Shortlist against no shortlist from two saved evaluations (their hypotheses.txt): how many translations differ,
and Koehn (2004)'s paired bootstrap on sacreBLEU (nmt_toolkit.evaluation.paired_bootstrap, 1,000 samples).

    PYTHONPATH=. python experiments/benchmark/shortlist-multi30k/bootstrap.py WITH_DIR WITHOUT_DIR DATA SPLIT
"""

import json
import sys
from pathlib import Path

from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.evaluation import paired_bootstrap


def main(with_dir: str, without_dir: str, data: str, split: str):
    references = [pair["de"] for pair in load_parallel_corpus(data, "en", "de", split)["translation"]]
    with_shortlist, without = (Path(folder, "hypotheses.txt").read_text().splitlines() for folder in (with_dir, without_dir))
    differ = sum(a != b for a, b in zip(with_shortlist, without))
    print(f"{with_dir} against {without_dir}: {differ} of {len(references)} translations differ; paired bootstrap "
          f"(with = system, without = baseline): "
          f"{json.dumps(paired_bootstrap(with_shortlist, without, references, tokenized=False))}")


if __name__ == "__main__":
    main(*sys.argv[1:])
