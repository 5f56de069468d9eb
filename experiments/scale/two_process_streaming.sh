#!/usr/bin/env bash
# Streaming under a two-process `accelerate launch` (DDP, gloo, CPU): an uninterrupted 6-step run against a run
# stopped after its checkpoint at step 3 and resumed; the final weights must be equal. Output: two_process_streaming.txt.
#   CORPUS=... TOKENIZER=... OUT=... bash experiments/scale/two_process_streaming.sh
# CORPUS: an OPUS-shaped folder (scripts/make_synthetic_corpus.py --opus100_shaped --train_pairs 20000 --languages
# af am an ar as az --vocabulary_size 2000 --validation_pairs 50); TOKENIZER: scripts/train_tokenizer.py --dataset
# $CORPUS --language_pairs all --merges 2000.
set -euo pipefail
COMMON="--model_name_or_path hub_configs/dwlstm-base-6l.json --tokenizer_name_or_path $TOKENIZER
 --config_overrides d_model=32,ffn_dim=64,encoder_attention_heads=2,decoder_attention_heads=2,encoder_layers=1,decoder_layers=1
 --dataset $CORPUS --language_pairs all --streaming --sampling_temperature 5 --stream_buffer_pairs 2000 --max_tokens 512
 --warmup_steps 2 --save_steps 3 --logging_steps 1 --use_cpu --disable_tqdm true"
LAUNCH="python -m accelerate.commands.launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no"
$LAUNCH --main_process_port 29611 scripts/train_translation.py $COMMON --max_steps 6 --output_dir $OUT/ddp-a
$LAUNCH --main_process_port 29612 scripts/train_translation.py $COMMON --max_steps 3 --output_dir $OUT/ddp-b
$LAUNCH --main_process_port 29613 scripts/train_translation.py $COMMON --max_steps 6 --output_dir $OUT/ddp-b --resume_from_checkpoint last
python -c "
from safetensors.torch import load_file
a, b = (load_file('$OUT/' + run + '/model.safetensors') for run in ('ddp-a', 'ddp-b'))
print('2-process: resumed == uninterrupted', all((a[k] == b[k]).all() for k in a))"
