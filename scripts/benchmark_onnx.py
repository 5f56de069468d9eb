"""`dwlstm-benchmark-onnx` (installed with the package) from a clone: the code and its --help are in
`nmt_toolkit.lab.commands.benchmark_onnx`."""

# main: the tests call it in-process
from nmt_toolkit.lab.commands.benchmark_onnx import main, run  # noqa: F401

if __name__ == "__main__":
    run()
