"""``python -m tidegate.sim customs|tos|database [options]``."""

from __future__ import annotations

from tidegate.sim._cli import main

if __name__ == "__main__":
    main(prog_name="python -m tidegate.sim")
