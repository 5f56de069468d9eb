"""Seconds per training update of the depth trend's models, to compare them at equal wall-clock time: the
depth-wise LSTM and the pre-norm residual Transformer at d 128 / 4 heads / d_ff 512 and 6+6, 12+12, 24+24 layers,
an 8,106-word vocabulary (the trend's tokenizer), one 2,048-token batch as the training script packs them (128
pairs x 16 tokens a side), forward + backward + Adam, one thread, every model once per round, medians over the rounds.

    PYTHONPATH=. python experiments/benchmark/depth_trend_step_time.py [rounds]   # quiet machine
    # record: depth_trend_step_time.txt
"""

import sys
import time

import torch

from modeling_dwlstm.precision import cpu_features
from nmt_toolkit.lab.benchmark import build_model, interleaved_medians, make_optimizer, random_batch, training_step

VOCABULARY, PAIRS, LENGTH = 8106, 128, 16
MODELS = {f"{member}-{layers}l": (member, layers) for member in ("dwlstm", "residual-prenorm") for layers in (6, 12, 24)}


def main(rounds: int = 5):
    torch.set_num_threads(1)
    print(f"# PYTHONPATH=. python experiments/benchmark/depth_trend_step_time.py {rounds}   "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu_features().describe()}; 1 thread)")
    batch = random_batch(PAIRS, LENGTH, LENGTH, VOCABULARY, seed=1)
    tasks = {}
    for name, (member, layers) in MODELS.items():
        torch.manual_seed(0)
        model = build_model(member, "base", VOCABULARY, d_model=128, heads=4, ffn_dim=512, encoder_layers=layers,
                            decoder_layers=layers)
        optimizer = make_optimizer(model)
        tasks[name] = lambda m=model, o=optimizer: training_step(m, o, batch, "cpu")
        tasks[name]()  # warm-up
    seconds = interleaved_medians(tasks, rounds, "cpu")
    reference = seconds["residual-prenorm-24l"]
    for name, value in seconds.items():
        print(f"{name}: {value:.3f} s per update ({value / reference:.2f}x residual-prenorm-24l's)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
