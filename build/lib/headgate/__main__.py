"""``python -m headgate``: the ``headgate`` command, for when the console script is not
on PATH (a venv that is not activated, an embedded interpreter)."""

from headgate.cli import main

if __name__ == "__main__":
    main()
