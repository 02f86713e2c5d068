#!/usr/bin/env python
"""Evaluate and use trained models: ``python eval.py --help`` lists the sub-commands."""
from data_prep.errors import exit_if_missing_dependency

try:
    from globetrotter.evaluation.cli import main
except ModuleNotFoundError as err:  # run outside the project's .venv: one line naming the install command
    exit_if_missing_dependency(err, "eval.py")

if __name__ == "__main__":
    main()
