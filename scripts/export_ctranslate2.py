"""`dwlstm-export-ctranslate2` (installed with the package) from a clone: the code and its --help
are in `nmt_toolkit.commands.export_ctranslate2`."""

# main: the tests call it in-process
from nmt_toolkit.commands.export_ctranslate2 import main, run  # noqa: F401

if __name__ == "__main__":
    run()
