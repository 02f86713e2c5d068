"""``python -m globetrotter.zeroshot.cli``: the ``zeroshot`` command."""
from . import main

raise SystemExit(main())
