"""`dwlstm-average-checkpoints` (installed with the package) from a clone: the code and its --help
are in `nmt_toolkit.commands.average_checkpoints`."""

# main: the tests call it in-process
from nmt_toolkit.commands.average_checkpoints import main, run  # noqa: F401

if __name__ == "__main__":
    run()
