"""`dwlstm-record-checksums` (installed with the package) from a clone: the code and its --help are
in `nmt_toolkit.commands.record_checksums`."""

# main: the tests call it in-process
from nmt_toolkit.commands.record_checksums import main, run  # noqa: F401

if __name__ == "__main__":
    run()
