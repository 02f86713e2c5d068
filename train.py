#!/usr/bin/env python
"""Train Globetrotter: ``python train.py`` (quickstart) or ``accelerate launch train.py --config ...``."""
from globetrotter.training.cli import main

if __name__ == "__main__":
    main()
