"""The research side's installed commands (`dwlstm-benchmark`, `dwlstm-run-experiments`, ...), one
module each with `main(argv)` and `run()`, as in `nmt_toolkit.commands` (which never imports the
lab)."""
