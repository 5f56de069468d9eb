"""Serve a demo page for a saved model or a Hub id (Gradio; pip install 'modeling-dwlstm[demo]').

    dwlstm-demo --model runs/m30k-ende/averaged             # http://127.0.0.1:7860
    dwlstm-demo --model runs/m30k-ende/averaged --precision auto
    MODEL_ID=user/dwlstm-m30k-ende PRECISION=auto dwlstm-demo --host 0.0.0.0 --port 8080

The page: a text box, the direction (a multilingual model: a source and a target box), the beam
size, the translation and its time; `/translate` is its HTTP API (gradio_client). The work is done
by `nmt_toolkit.demo.build_demo`; space/app.py serves the same page as a Hugging Face Space.
"""

import argparse
import os

# registers the model family with the Auto classes and the pipeline
import modeling_dwlstm  # noqa: F401
from modeling_dwlstm.precision import AUTO, PRECISIONS

from ..arguments import positive_int
from ..cli import exit_on_error
from ..demo import MODEL_VARIABLE, PRECISION_VARIABLE, build_demo, precision_from_environment
from ..files import set_threads


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model",
        default=os.environ.get(MODEL_VARIABLE),
        help=(
            f"A saved model folder (with its tokenizer) or a Hub id (default: ${MODEL_VARIABLE})."
        ),
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="The address to serve on (0.0.0.0: every interface)."
    )
    parser.add_argument("--port", type=positive_int, default=7860)
    parser.add_argument(
        "--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's)."
    )
    parser.add_argument(
        "--trust_remote_code", action="store_true", help="Load a model whose code is not installed."
    )
    parser.add_argument(
        "--precision",
        choices=[AUTO, *PRECISIONS],
        default=None,
        help=(
            "dtype and quantisation the model decodes in: float32, bfloat16, int8, bfloat16+int8, "
            "or auto: the one measured fastest on this CPU's class (docs/inference.md; default: "
            f"${PRECISION_VARIABLE}, else float32)."
        ),
    )
    args = parser.parse_args(argv)
    if not args.model:
        raise ValueError(f"Give the model: --model FOLDER_OR_HUB_ID, or set {MODEL_VARIABLE}.")
    precision = args.precision or precision_from_environment()
    set_threads(args.threads)
    build_demo(args.model, trust_remote_code=args.trust_remote_code, precision=precision).launch(
        server_name=args.host, server_port=args.port
    )


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
