"""`dwlstm-plot-training` (installed with the package) from a clone: the code and its --help are in
`nmt_toolkit.lab.commands.plot_training`."""

# main: the tests call it in-process
from nmt_toolkit.lab.commands.plot_training import main, run  # noqa: F401

if __name__ == "__main__":
    run()
