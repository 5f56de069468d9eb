"""`dwlstm-build-shortlist` (installed with the package) from a clone: the code and its --help are
in `nmt_toolkit.commands.build_shortlist`."""

# main: the tests call it in-process
from nmt_toolkit.commands.build_shortlist import main, run  # noqa: F401

if __name__ == "__main__":
    run()
