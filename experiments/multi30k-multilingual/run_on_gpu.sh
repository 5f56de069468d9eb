#!/bin/bash
# The multilingual campaign (experiments/multi30k-multilingual/experiment.json) on one GPU, as it was run for RESULTS.md.
# Its models train at the same time, each followed by its fine-tuning stages (ROBT): one runner process per model,
# each with its own output and record folders, all sharing one tokenizer. The evaluations run on the GPU as well
# (--device cuda, decoding batches of 16,384 source tokens). An evaluation that needs the baseline's results waits
# until they are there. At the end the records are gathered in experiments/NAME and the table is written.
# Run it from the repository root; run it again after an interruption and it goes on where it stopped.
#
#   bash experiments/multi30k-multilingual/run_on_gpu.sh
#   WORK=/tmp/m30k THREADS=2 MAX_SECONDS=3600 DEVICE=cuda EXPERIMENT=experiments/multi30k-multilingual/experiment.json bash ...
set -euo pipefail
experiment=${EXPERIMENT:-experiments/multi30k-multilingual/experiment.json}
work=${WORK:-runs/multi30k-multilingual-gpu}
threads=${THREADS:-2}
device=${DEVICE:-cuda}
deadline=$(( $(date +%s) + ${MAX_SECONDS:-86400} ))
mkdir -p "$work"
work=$(cd "$work" && pwd)

# The experiment with its evaluation on the device, in the work folder (its relative paths made absolute).
device_experiment="$work/$(basename "$experiment" .json)-$device.json"
# Prints the experiment's name with the baseline model's run ids (NAME RUN-seedK...), then one line per model:
# CHAIN RUN... (the model's run, then the runs that start from it), the baseline's first.
lines=$(python - "$experiment" "$device_experiment" "$device" <<'EOF'
import json, sys
from pathlib import Path
source, target, device = sys.argv[1:]
spec = json.loads(Path(source).read_text(encoding="utf-8"))
folder = Path(source).resolve().parent
if (folder / spec["data"]["dataset"]).exists():
    spec["data"]["dataset"] = str((folder / spec["data"]["dataset"]).resolve())
for run in spec["runs"]:
    if "config" in run:
        run["config"] = str((folder / run["config"]).resolve())
spec["evaluation"] = {**spec.get("evaluation", {}), "device": device, "max_tokens": 16384}
Path(target).write_text(json.dumps(spec, indent=1), encoding="utf-8")
def stages(name):
    later = [run["name"] for run in spec["runs"] if run.get("from") == name]
    return [name] + [stage for run in later for stage in stages(run)]
models = [run["name"] for run in spec["runs"] if "from" not in run]
baseline = next(model for model in models if spec.get("baseline") in stages(model))
seeds = {run["name"]: run.get("seeds", [1]) for run in spec["runs"]}
print(spec["name"], *(f"{run}-seed{seed}" for run in stages(baseline) for seed in seeds[run]))
for model in [baseline] + [model for model in models if model != baseline]:
    print(model, *stages(model))
EOF
)
read -r name baseline_run_ids <<<"$(head -n 1 <<<"$lines")"
chains=$(tail -n +2 <<<"$lines")
baseline_chain=$(head -n 1 <<<"$chains" | cut -d' ' -f1)

chain() {  # CHAIN RUN...: the runner on these runs; again after a pause while it waits for the baseline's results
    local chain=$1; shift
    until python scripts/run_experiments.py "$device_experiment" --output_dir "$work/$chain/runs" \
            --record_dir "$work/$chain/records" --threads "$threads" --no_table --only "$@" >>"$work/$chain.log" 2>&1; do
        if ! tail -n 1 "$work/$chain.log" | grep -q "needs its baseline's results"; then
            echo "$chain failed: see $work/$chain.log" >&2; return 1
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then echo "$chain: out of time" >&2; return 1; fi
        sleep 10
    done
}

chain $(head -n 1 <<<"$chains") &
pids=($!)
until [ -f "$work/$baseline_chain/records/tokenizer/tokenizer.json" ]; do
    kill -0 "${pids[0]}" 2>/dev/null || { echo "the baseline's runner ended before its tokenizer was there"; exit 1; }
    sleep 2
done
while read -r model runs; do
    [ "$model" = "$baseline_chain" ] && continue
    mkdir -p "$work/$model/runs" "$work/$model/records"
    [ -d "$work/$model/records/tokenizer" ] || cp -r "$work/$baseline_chain/records/tokenizer" "$work/$model/records/"
    for run_id in $baseline_run_ids; do  # the baseline's results, read by this model's evaluations
        ln -sfn "$work/$baseline_chain/runs/$run_id" "$work/$model/runs/$run_id"
    done
    chain "$model" $runs &
    pids+=($!)
done <<<"$chains"
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ "$status" = 0 ] || { echo "some runs did not finish: see $work/*.log"; exit 1; }

records=experiments/$name
mkdir -p "$records"
for folder in "$work"/*/records; do cp -r "$folder"/. "$records"/; done
python scripts/run_experiments.py "$experiment" --table_only
