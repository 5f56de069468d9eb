"""Write tests/compat/reference.json: the tokens transformers' own decoding loop gives for every
member's tiny model (greedy, beam 4, beam 4 with options) and the losses of a few Trainer steps, in
this environment.

Run it with the main environment's transformers (the newest of the matrix) when a case in cases.py
changes:
    .venv/bin/python tests/compat/make_reference.py
"""

import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).parent))
import cases  # noqa: E402


def main() -> None:
    transformers.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as output_dir:
        reference = {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            **cases.reference_outputs(output_dir),
        }
    partial = cases.REFERENCE.with_suffix(".json.partial")
    partial.write_text(json.dumps(reference, indent=1) + "\n")
    os.replace(partial, cases.REFERENCE)
    print(f"wrote {cases.REFERENCE}")


if __name__ == "__main__":
    main()
