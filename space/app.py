"""The demo page (nmt_toolkit.demo) as a Hugging Face Space runs it: `python app.py`, the model
named by the Space's MODEL_ID variable (Settings -> Variables), e.g.
MODEL_ID=user/dwlstm-m30k-ende, decoding in the precision its PRECISION variable names (float32
where unset; auto: the one measured fastest on the Space's CPU)."""

import os
import sys

# registers the model family with the Auto classes and the pipeline
import modeling_dwlstm  # noqa: F401
from modeling_dwlstm.precision import AUTO, PRECISIONS
from nmt_toolkit.demo import MODEL_VARIABLE, PRECISION_VARIABLE, build_demo

if not os.environ.get(MODEL_VARIABLE):
    sys.exit(f"app.py: set {MODEL_VARIABLE} to a Hub model id (or a local model folder).")
precision = os.environ.get(PRECISION_VARIABLE) or "float32"
if precision not in (AUTO, *PRECISIONS):
    sys.exit(
        f"app.py: {PRECISION_VARIABLE} must be {AUTO} or one of {', '.join(PRECISIONS)} "
        f"(or unset: float32), got {precision!r}."
    )
demo = build_demo(os.environ[MODEL_VARIABLE], precision=precision)

if __name__ == "__main__":
    demo.launch()
