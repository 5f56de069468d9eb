"""Translate a file or standard input, one line in and one line out (`dwlstm-translate`).

    printf 'A man rides a horse.\n' | dwlstm-translate --model runs/m30k-ende/averaged
    dwlstm-translate --model runs/m30k-ende/averaged --input test.en --output test.de --num_beams 4
    dwlstm-translate --model runs/m30k-ende/averaged --input big.en --output big.de --resume   # after an interruption
    dwlstm-translate --model runs/m30k-m2m --input requests.jsonl --json_lines --output out.txt

The work is done by `nmt_toolkit.translate.run_translation`.
"""  # noqa: E501

from transformers import HfArgumentParser

import modeling_dwlstm  # noqa: F401  (registers the model family with the Auto classes)

from ..cli import exit_on_error
from ..translate import TranslationArguments, TranslationInterrupted, run_translation


def main(argv=None):
    (arguments,) = HfArgumentParser(TranslationArguments).parse_args_into_dataclasses(args=argv)
    return run_translation(arguments)


def run():
    exit_on_error(main, also=(TranslationInterrupted,))


if __name__ == "__main__":
    run()
