"""The demo page (nmt_toolkit.demo) as a Hugging Face Space runs it: `python app.py`, the model
named by the Space's MODEL_ID variable (Settings -> Variables), e.g.
MODEL_ID=user/dwlstm-m30k-ende, decoding in the precision its PRECISION variable names (float32
where unset; auto: the one measured fastest on the Space's CPU)."""

import os
import sys

# registers the model family with the Auto classes and the pipeline
import modeling_dwlstm  # noqa: F401
from nmt_toolkit.demo import MODEL_VARIABLE, build_demo, precision_from_environment

if not os.environ.get(MODEL_VARIABLE):
    sys.exit(f"app.py: set {MODEL_VARIABLE} to a Hub model id (or a local model folder).")
try:
    precision = precision_from_environment()
except ValueError as error:
    sys.exit(f"app.py: {error}")
demo = build_demo(os.environ[MODEL_VARIABLE], precision=precision)

if __name__ == "__main__":
    demo.launch()
