"""The installed commands (`dwlstm-train`, `dwlstm-translate`, ...: setup.cfg's console entry
points), one module each with `main(argv)` (the parser, then a tested function of the package) and
`run()` (`main` behind `cli.exit_on_error`: a bad input ends it with one line on standard error).
The files in the repository's `scripts/` folder call the same functions."""
