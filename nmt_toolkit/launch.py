"""What the launcher gave this process, checked before any work, so that a launch that went wrong
says so instead of training something else than was asked.

- `accelerate launch --cpu --num_processes N` (and `--num_processes N` without `--multi_gpu` on a
  machine without GPUs) starts one process, whatever N: accelerate's single-process launcher only
  sets the rendezvous address. Refused, with the commands that start N processes.
- Several processes (torchrun, `accelerate launch --multi_gpu`) on a machine without an accelerator
  train on the CPU with gloo: `--use_cpu` is implied. Without it transformers takes each process for
  a run of its own (world size 1, every process the main one), and all of them write the same
  output folder.
- accelerate's FSDP and DeepSpeed on a machine without an accelerator: accelerate 1.15 turns a run
  into FSDP only on GPU-like devices (on the CPU it would silently train with DDP) and starts
  DeepSpeed only without `--cpu`. Refused; PyTorch's FSDP2 itself runs on the CPU
  (`nmt_toolkit.sharding`, docs/training.md).
- `check_ranks_agree`: the Trainer must see as many processes as were launched before a process
  claims the output folder.
"""

import os

import torch

# The world size as torchrun / accelerate's multi-process launcher and the MPI launchers set it.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
SEVERAL_PROCESSES = (
    "accelerate launch --multi_gpu --num_processes N ... (on CPUs too: --use_cpu is implied there) "
    "or torchrun --nproc_per_node N ..."
)


def launched_world_size() -> int:
    """The number of processes the launcher started (1 without a multi-process launcher)."""
    for name in WORLD_SIZE_VARIABLES:
        if os.environ.get(name, "").strip():
            return int(os.environ[name])
    return 1


def is_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def check_launch(training_args) -> None:
    """Refuse launches that would silently train otherwise than asked; imply `--use_cpu` for several
    processes on a machine without an accelerator (see the module's docstring)."""
    world_size = launched_world_size()
    if "ACCELERATE_USE_CPU" in os.environ and os.environ.get("MASTER_PORT") and world_size == 1:
        raise ValueError(
            "accelerate launch started a single process although it was given several "
            "(--num_processes "
            "or --num_machines above 1 with --cpu, or without --multi_gpu): its single-process "
            "launcher "
            f"ignores the count. For N processes use {SEVERAL_PROCESSES} (docs/training.md)."
        )
    if torch.accelerator.is_available():
        return
    for variable, engine in (
        ("ACCELERATE_USE_FSDP", "FSDP"),
        ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed"),
    ):
        if is_true(variable):
            raise ValueError(
                f"accelerate launch was asked for {engine}, which accelerate runs on GPUs only: "
                "on this "
                "machine without an accelerator it would train with plain DDP. On CPUs use "
                f"{SEVERAL_PROCESSES} for DDP, or nmt_toolkit.sharding.shard_layers in a "
                "training loop "
                "under torchrun for FSDP (docs/training.md)."
            )
    if world_size > 1:
        training_args.use_cpu = True


def check_ranks_agree(training_args) -> None:
    """Refuse to go on when the Trainer sees fewer processes than were launched: every process would
    take itself for the main one and write the same output folder."""
    launched = (
        torch.distributed.get_world_size()
        if torch.distributed.is_initialized()
        else launched_world_size()
    )
    if training_args.world_size != launched:
        raise ValueError(
            f"{launched} processes were launched but the Trainer sees {training_args.world_size} "
            f"(device {training_args.device}); every process would train alone and write "
            f"{training_args.output_dir}. On CPUs pass --use_cpu; on GPUs start one process per "
            "GPU."
        )


__all__ = ["check_launch", "check_ranks_agree", "launched_world_size"]
