"""``python -m backretrieval.cli``: the ``backretrieval`` command."""
import sys

from . import main

sys.exit(main())
