"""`dwlstm-measure-gradient-norms` (installed with the package) from a clone: the code and its --help are in
`nmt_toolkit.lab.commands.measure_gradient_norms`."""

from nmt_toolkit.lab.commands.measure_gradient_norms import main, run  # noqa: F401  (main: the tests call it in-process)

if __name__ == "__main__":
    run()
