"""Train a translation model on Seq2SeqTrainer with the papers' recipe (`nmt_toolkit.training`).

Single process:
    dwlstm-train --model_name_or_path hub_configs/dwlstm-base-6l.json \\
        --tokenizer_name_or_path tok-wmt14-ende --dataset wmt14 --source_lang en --target_lang de \\
        --validation_split validation --max_tokens 4096 --target_tokens_per_update 25000 --output_dir runs/ende
Several processes (same arguments):
    accelerate launch --multi_gpu --num_processes 8 -m nmt_toolkit.commands.train_translation ...
    torchrun --nproc_per_node 8 -m nmt_toolkit.commands.train_translation ...
    accelerate launch --config_file examples/accelerate/fsdp2.yaml -m nmt_toolkit.commands.train_translation ...   (fully sharded)
Continue a killed run: add `--resume_from_checkpoint last`. `--help` lists every option, including
all of `Seq2SeqTrainingArguments`.
"""  # noqa: E501

import torch

from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.training import parse_training_arguments, train_translation


def main():
    try:
        train_translation(*parse_training_arguments())
    finally:
        # A gloo group left to the interpreter's exit can abort a finished run's process ("terminate
        # called without an active exception", exit code -6), so each process releases its own.
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
