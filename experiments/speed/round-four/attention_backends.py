"""SDPA's CPU backends at a base training step's attention shapes (32 sentences x 8 heads x 64
positions x 64), forward + backward, float32 and bfloat16, interleaved, medians.

    PYTHONPATH=. python experiments/speed/round-four/attention_backends.py --threads 1
"""

import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from nmt_toolkit.lab.speed import cpu_identity, interleaved_times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {args}, torch {torch.__version__}\n# {cpu_identity()}")
    tasks = {}
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v = (torch.randn(32, 8, 64, 64, dtype=dtype, requires_grad=True) for _ in range(3))
        grad = torch.randn(32, 8, 64, 64, dtype=dtype)
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):

            def task(q=q, k=k, v=v, grad=grad, backend=backend):
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

            tasks[str(dtype).removeprefix("torch."), backend.name] = task
    for task in tasks.values():
        task()
    times = interleaved_times(tasks, args.repeats, "cpu")
    for key, values in times.items():
        print(
            f"{key[0]:9} {key[1]:16} median {1000 * statistics.median(values):8.1f} ms  min "
            f"{1000 * min(values):8.1f} ms"
        )


if __name__ == "__main__":
    main()
