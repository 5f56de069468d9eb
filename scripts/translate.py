"""Translate a file or standard input, one line in and one line out: `dwlstm-translate` where the package is
installed (see `nmt_toolkit.commands.translate`).

    printf 'A man rides a horse.\n' | python scripts/translate.py --model runs/m30k-ende/averaged
"""

from nmt_toolkit.commands.translate import main, run  # noqa: F401  (main: the tests call it in-process)

if __name__ == "__main__":
    run()
