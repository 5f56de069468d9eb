"""`dwlstm-run-experiments` (installed with the package) from a clone: the code and its --help are
in `nmt_toolkit.lab.commands.run_experiments`."""

# main: the tests call it in-process
from nmt_toolkit.lab.commands.run_experiments import main, run  # noqa: F401

if __name__ == "__main__":
    run()
