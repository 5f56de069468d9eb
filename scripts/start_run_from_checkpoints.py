"""`dwlstm-start-run-from-checkpoints` (installed with the package) from a clone: the code and its
--help are in `nmt_toolkit.lab.commands.start_run_from_checkpoints`."""

# main: the tests call it in-process
from nmt_toolkit.lab.commands.start_run_from_checkpoints import main, run  # noqa: F401

if __name__ == "__main__":
    run()
