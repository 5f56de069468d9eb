"""The research side's installed commands (`dwlstm-measure-speed`, `dwlstm-run-experiments`, ...),
one module each with `main(argv)` and `run()`, as in `nmt_toolkit.commands` (which never imports
the lab)."""
