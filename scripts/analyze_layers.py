"""`dwlstm-analyze-layers` (installed with the package) from a clone: the code and its --help are in
`nmt_toolkit.lab.commands.analyze_layers`."""

# main: the tests call it in-process
from nmt_toolkit.lab.commands.analyze_layers import main, run  # noqa: F401

if __name__ == "__main__":
    run()
