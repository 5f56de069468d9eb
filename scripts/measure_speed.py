"""`dwlstm-measure-speed` (installed with the package) from a clone: the code and its --help are in
`nmt_toolkit.lab.commands.measure_speed`."""

# main: the tests call it in-process
from nmt_toolkit.lab.commands.measure_speed import main, run  # noqa: F401

if __name__ == "__main__":
    run()
