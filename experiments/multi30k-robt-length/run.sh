#!/bin/bash
# The ROBT-length study on val (experiments/multi30k-robt-length/experiment.json), built on the multilingual campaign's runs:
# its baseline and its 300-update ROBT stage are copied (scripts/start_run_from_checkpoints.py), robt-600 continues
# robt-300's checkpoint 300 and robt-1200 continues robt-600's checkpoint 600 (the stage's learning rate is
# constant and resuming is exact). Run it from the repository root after the campaign's
# residual-prenorm-laln-lalt and residual-prenorm-laln-lalt-robt runs; run again after an interruption, it goes on
# where it stopped.
#
#   CAMPAIGN=runs/experiments/multi30k-multilingual THREADS=1 bash experiments/multi30k-robt-length/run.sh
set -euo pipefail
campaign=${CAMPAIGN:-runs/experiments/multi30k-multilingual}
threads=${THREADS:-1}
experiment=experiments/multi30k-robt-length/experiment.json
study=runs/experiments/multi30k-robt-length
tokenizer=experiments/multi30k-robt-length/tokenizer
baseline_model=$study/residual-prenorm-laln-lalt-seed1/averaged

start() {  # RUN SOURCE... : start RUN from SOURCE (checkpoints or a finished run), unless it has been started
    local run=$1; shift
    if [ ! -e "$study/$run-seed1/train" ]; then
        python scripts/start_run_from_checkpoints.py --checkpoints "$@" --train_dir "$study/$run-seed1/train" \
            --set "model_name_or_path=$model" "tokenizer_name_or_path=$tokenizer"
    fi
}
runs() { python scripts/run_experiments.py "$experiment" --threads "$threads" --no_table --only "$@"; }

model=$PWD/hub_configs/residual-prenorm-base-6l.json
start residual-prenorm-laln-lalt "$campaign/residual-prenorm-laln-lalt-seed1/train"
model=$baseline_model
start robt-300 "$campaign/residual-prenorm-laln-lalt-robt-seed1/train"
start robt-600 "$campaign/residual-prenorm-laln-lalt-robt-seed1/train/checkpoint-300"
runs residual-prenorm-laln-lalt robt-300 robt-600
start robt-1200 "$study/robt-600-seed1/train/checkpoint-600"
runs robt-1200
python scripts/run_experiments.py "$experiment" --table_only
