"""`dwlstm-gpu-benchmark` (installed with the package) from a clone, or on a GPU machine with this
repository on PYTHONPATH and nothing installed but torch and transformers: the code and its --help
are in `nmt_toolkit.lab.commands.gpu_benchmark`."""

# main: the tests call it in-process
from nmt_toolkit.lab.commands.gpu_benchmark import main, run  # noqa: F401

if __name__ == "__main__":
    run()
