#!/bin/bash
# Start a 12+12 run of experiments/depth_trend.json from the 500-update checkpoint of the same model in the schedule
# grid (depth_schedule_12l.json) or the forget-gate check (depth_forget_gate_12l.json), so the trend's 1,000 updates
# cost 500. Same settings and batches: the runner resumes the copied checkpoint, and the inverse-square-root
# schedule does not depend on max_steps, so the run passes through the state an uninterrupted one would. The
# checkpoint records the paths of its model config and tokenizer, which this rewrites to the trend's before
# re-recording the checkpoint's checksums. The runner trains the trend's tokenizer as it trained theirs (the same
# data and merges give the same file), and resuming checks the tokenizer's digest, so a different one is refused.
#
#   experiments/depth_trend_continue.sh SOURCE_TRAIN_DIR TREND_RUN HUB_CONFIG
#   e.g. experiments/depth_trend_continue.sh \
#            runs/experiments/depth-schedule-12l/prenorm-12l-lr1e-3-w100-seed1/train prenorm-12l \
#            residual-prenorm-base-6l.json
# Run it from the copy of the repository that runs the trend, before `scripts/run_experiments.py`.
set -euo pipefail
source_dir=$1; run=$2; hub_config=$3
target=runs/experiments/depth-trend/$run-seed1/train
if [ -e "$target" ]; then echo "$target exists: it has been started already; remove it to start it again." >&2; exit 2; fi
mkdir -p "$target"
cp -r "$source_dir/checkpoint-500" "$target/"
python - "$target/checkpoint-500/run_arguments.json" "$PWD/hub_configs/$hub_config" <<'PY'
import json, sys
path, config = sys.argv[1:]
arguments = json.load(open(path))
arguments["model_name_or_path"] = config
arguments["tokenizer_name_or_path"] = "experiments/results/depth-trend/tokenizer"
json.dump(arguments, open(path, "w"), indent=2)
PY
python scripts/record_checksums.py "$target/checkpoint-500"
