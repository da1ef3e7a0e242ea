"""``python -m morphz``: the ``morphz`` command, for hosts that spawn an interpreter by path
(``/path/to/.venv/bin/python -m morphz mcp``) instead of finding ``morphz`` on ``PATH``."""

from morphz.cli.main import main

main()
