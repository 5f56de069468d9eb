"""Export a residual model (pre- or post-norm) to CTranslate2 (`nmt_toolkit.ctranslate2_export`).

    dwlstm-export-ctranslate2 --model runs/residual-prenorm --output_dir runs/residual-prenorm-ct2
    dwlstm-export-ctranslate2 --model runs/residual-prenorm --output_dir ct2-int8 --quantization int8

Then `ctranslate2.Translator(output_dir, compute_type="int8")` translates the tokenizer's tokens.
The other members cannot be expressed in CTranslate2 and are refused with a message.
"""  # noqa: E501

import argparse

from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.ctranslate2_export import export_ctranslate2


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", required=True, help="A saved residual model directory (with its tokenizer)."
    )
    parser.add_argument(
        "--output_dir", required=True, help="A new directory for the CTranslate2 model."
    )
    parser.add_argument(
        "--quantization",
        default=None,
        help=(
            "CTranslate2 weight type: int8, int8_float32, int8_bfloat16, float16, bfloat16, ... "
            "(default: float32; the engine can also convert at load time with compute_type)."
        ),
    )
    parser.add_argument(
        "--overwrite_output_dir", action="store_true", help="Replace what --output_dir holds."
    )
    args = parser.parse_args(argv)
    output = export_ctranslate2(
        args.model, args.output_dir, args.quantization, overwrite=args.overwrite_output_dir
    )
    print(f"Exported {args.model} to CTranslate2 in {output}")


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
