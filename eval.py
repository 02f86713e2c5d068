#!/usr/bin/env python
"""Evaluate and use trained models: ``python eval.py --help`` lists the sub-commands."""
from globetrotter.evaluation.cli import main

if __name__ == "__main__":
    main()
