"""``python -m globetrotter.evaluation.cli``: the ``globetrotter-eval`` command."""
from . import main

main()
