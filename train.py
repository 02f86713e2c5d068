#!/usr/bin/env python
"""Train Globetrotter: ``python train.py`` (quickstart) or ``accelerate launch train.py --config ...``."""
from data_prep.errors import exit_if_missing_dependency

try:
    from globetrotter.training.cli import main
except ModuleNotFoundError as err:  # run outside the project's .venv: one line naming the install command
    exit_if_missing_dependency(err, "train.py")

if __name__ == "__main__":
    main()
