"""Export a saved model of any member to ONNX, float32 and int8, and translate with ONNX Runtime
(see nmt_toolkit/onnx_export.py).

    dwlstm-export-onnx --model runs/dwlstm --output_dir runs/dwlstm-onnx
    dwlstm-export-onnx --model runs/dwlstm --output_dir runs/dwlstm-onnx --overwrite_output_dir --no_int8

The folder holds encoder.onnx and decoder_step.onnx (and their _int8 versions), the tokenizer and
onnx_export.json. Then, with numpy and onnxruntime doing the decoding:

    from nmt_toolkit.onnx_export import OnnxTranslator
    print(OnnxTranslator("runs/dwlstm-onnx", precision="int8").translate(["A man is riding a bike."]))
"""  # noqa: E501

import argparse

from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.onnx_export import export_onnx


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", required=True, help="A saved model directory (with its tokenizer), any member."
    )
    parser.add_argument(
        "--output_dir", required=True, help="A new directory for the ONNX graphs and the tokenizer."
    )
    parser.add_argument(
        "--no_int8",
        action="store_true",
        help="Write only the float32 graphs (by default ONNX Runtime's int8 versions are added).",
    )
    parser.add_argument(
        "--overwrite_output_dir", action="store_true", help="Replace what --output_dir holds."
    )
    args = parser.parse_args(argv)
    output = export_onnx(
        args.model, args.output_dir, int8=not args.no_int8, overwrite=args.overwrite_output_dir
    )
    print(f"Exported {args.model} to ONNX in {output}")


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
