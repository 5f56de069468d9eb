#!/usr/bin/env bash
# The README's multilingual Multi30k table: one English-centric model over six directions (en<->de, en<->fr,
# en<->cs) as a depth-wise LSTM and as a residual pre-norm Transformer of the same size and step budget, and a
# bilingual en->de model of that size and budget; each evaluated on test_2016_flickr (supervised + zero-shot).
#
#   bash scripts/multilingual_multi30k.sh            # everything, two runs side by side (one thread each)
#   STEPS=100 OUT=runs/m30k-small bash scripts/multilingual_multi30k.sh
#   DATA=path/to/multi30k bash scripts/multilingual_multi30k.sh   # DATA: a local Multi30k folder
#
# Resumable: a finished step is skipped (its final model / results.json exist), a killed training continues
# from its last checkpoint.
set -euo pipefail
DATA=${DATA:-../shared/data/multi30k}
OUT=${OUT:-runs/m30k}
STEPS=${STEPS:-600}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
SUPERVISED=en-de,de-en,en-fr,fr-en,en-cs,cs-en
ZERO_SHOT=de-fr,fr-de,de-cs,cs-de,fr-cs,cs-fr
SIZE=d_model=256,ffn_dim=1024,encoder_layers=3,decoder_layers=3,encoder_attention_heads=4,decoder_attention_heads=4
mkdir -p "$OUT"

[ -f "$OUT/tok-m2m/tokenizer.json" ] || $PY scripts/train_tokenizer.py --dataset "$DATA" \
    --language_pairs $SUPERVISED --sampling_temperature 5 --merges 8000 --output_dir "$OUT/tok-m2m"

train() {  # name, hub config, pairs
    local resume=()
    [ -f "$OUT/$1/model.safetensors" ] && return
    compgen -G "$OUT/$1/checkpoint-*" > /dev/null && resume=(--resume_from_checkpoint last)
    $PY scripts/train_translation.py --model_name_or_path "$2" --tokenizer_name_or_path "$OUT/tok-m2m" \
        --config_overrides "$SIZE" --dataset "$DATA" --language_pairs "$3" --sampling_temperature 5 \
        --validation_split val --max_validation_pairs 200 --max_tokens 2048 --max_steps "$STEPS" \
        --warmup_steps 200 --learning_rate 1.5e-3 --logging_steps 25 --save_steps 100 --save_total_limit 2 \
        --eval_strategy steps --eval_steps 200 --disable_tqdm true --output_dir "$OUT/$1" "${resume[@]}" \
        >> "$OUT/$1.log" 2>&1
}

evaluate() {  # name, pairs, output, extra arguments
    [ -f "$OUT/$1/$3/results.json" ] && return
    $PY scripts/evaluate_translation.py --model "$OUT/$1" --data "$DATA" --split test_2016_flickr \
        --language_pairs "$2" --num_beams 4 --output_dir "$OUT/$1/$3" "${@:4}" > "$OUT/$1-$3.log" 2>&1
}

train dwlstm-m2m hub_configs/dwlstm-base-6l.json $SUPERVISED &
train residual-m2m hub_configs/residual-prenorm-base-6l.json $SUPERVISED &
wait
{
    evaluate residual-m2m $SUPERVISED,$ZERO_SHOT test
    evaluate dwlstm-m2m $SUPERVISED,$ZERO_SHOT test --baseline_results "$OUT/residual-m2m/test/results.json" \
        --average_subset en-de,de-en
} &
train dwlstm-ende hub_configs/dwlstm-base-6l.json en-de &
wait
evaluate dwlstm-ende en-de test --off_target false
$PY scripts/results_table.py "$OUT/dwlstm-m2m/test/results.json" --baseline "$OUT/residual-m2m/test/results.json" \
    > "$OUT/table.md"
