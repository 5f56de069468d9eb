"""Translate a test set with beam search and report BLEU, chrF, speed and significance (as in Xu et
al. 2024, §3.1).

    dwlstm-evaluate --model runs/base-avg --output_dir runs/base-avg/test \
        --data wmt14 --split test --source_lang en --target_lang de --num_beams 4
    dwlstm-evaluate --model my-model --output_dir eval \
        --source_file test.en --reference_file test.de --target_lang de --baseline_hypotheses other/hypotheses.txt
    dwlstm-evaluate ... --quantize int8   # or --dtype bfloat16: low precision (precision.py)
    dwlstm-evaluate ... --precision auto  # the precision measured fastest on this CPU class

Writes `hypotheses.txt` (input order) and `results.json` into --output_dir and prints the results.
The work is done by `nmt_toolkit.evaluation.run_evaluation`.
"""  # noqa: E501

import json

from transformers import HfArgumentParser

import modeling_dwlstm  # noqa: F401  (registers the model family with the Auto classes)
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.evaluation import EvaluationArguments, run_evaluation


def main(argv=None):
    (arguments,) = HfArgumentParser(EvaluationArguments).parse_args_into_dataclasses(args=argv)
    print(json.dumps(run_evaluation(arguments), indent=2, ensure_ascii=False))


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
