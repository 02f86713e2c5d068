"""What the ``zeroshot`` sub-commands share: the help layout, argument types, the common options, output files."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from backretrieval.cli.common import inputs
from backretrieval.errors import BackRetrievalError
from backretrieval.outputs import writable_dir, writable_file
from backretrieval.records import json_text

from globetrotter.argtypes import positive_int, torch_device
from globetrotter.errors import UserError

from ..data import DEFAULT_CACHE


def formatter(prog: str) -> argparse.HelpFormatter:
    """The sub-commands' help layout: descriptions as written (line breaks kept), option help from column 36 at most."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=36)


def add_command(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser, name: str, help: str, description: str,
                example: str) -> argparse.ArgumentParser:
    """The parser of sub-command ``name``: the common options (``parent``), the help layout (:func:`formatter`),
    and ``example`` (its arguments) as the ``example: globetrotter-zeroshot NAME ...`` line after the options."""
    return sub.add_parser(name, parents=[parent], help=help, formatter_class=formatter, description=description,
                          epilog=f"example: globetrotter-zeroshot {name} {example}")


def check_no_shared_images(where: str, keys: Sequence[str], other_keys: Sequence[str], other: str, remedy: str) -> None:
    """One-line :class:`UserError` when the split named by ``where`` (e.g. ``--val DIR``) shows an image of the other
    split (``other``, e.g. ``"--train DIR images the adapter trains on"``), by image id; ``remedy`` ends it."""
    shared = set(keys) & set(other_keys)
    if shared:
        raise UserError(f"{where}: its captions show {len(shared)} of the {other} (e.g. {sorted(shared)[0]!r}); "
                        f"{remedy}")


def common_options() -> argparse.ArgumentParser:
    """The options of every sub-command (a parent parser)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), metavar="DIR",
                   help="where frozen text and image features are cached (default: $GLOBETROTTER_CACHE or outputs/cache)")
    p.add_argument("--device", type=torch_device, default="cpu",
                   help="torch device of the image model (and of the adapters `train` and `triplet` train): cpu, cuda, cuda:1, ... "
                        "(default cpu)")
    p.add_argument("--online", action="store_true", help="allow downloads (sentence-transformers models, timm 'hub' weights)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch CPU threads (default: this process's share of the free cores, as every heavy command; "
                        "1 is fastest on a busy machine)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def check_json(path: str | Path | None) -> None:
    """Refuse an ``--out`` FILE that could not be written (a folder, a file in the way) before any work: it was
    found out once the work was done, and the record lost."""
    if path:
        try:
            writable_file(path, "the JSON record")
        except BackRetrievalError as err:
            raise UserError(str(err)) from None


def provenance(args: argparse.Namespace) -> dict:
    """What every zeroshot record and checkpoint says of how it was made: ``inputs``, every option of the command line
    (as BackRetrieval's records list them), and the ``versions`` (as eval.py's records name them)."""
    from globetrotter.evaluation.records import versions

    return {"inputs": inputs(args), "versions": versions()}


def write_json(record: dict, path: str | Path | None, args: argparse.Namespace) -> None:
    """Write ``record``, with the :func:`provenance` of ``args``, to ``path`` (nothing without one) and say where, on
    stderr; a file it replaces is said, as eval.py says it of its records."""
    text = json_text({**record, **provenance(args)}, indent=2, ensure_ascii=False)
    if path:
        earlier = Path(path).is_file()
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text + "\n", encoding="utf-8")
        except OSError as err:
            raise UserError(f"{path}: cannot write the JSON record ({err.strerror or err})") from None
        note = " (it replaces an earlier record: write to another file to keep both)" if earlier else ""
        print(f"wrote {path}{note}", file=sys.stderr)


def check_out_dir(path: str | Path) -> Path:
    """Refuse an output folder that could not be created (a file in the way, a parent not writable) WITHOUT
    creating it: a bad ``--out`` fails before any training, and a run refused later leaves nothing behind."""
    try:
        return writable_dir(path, "the output folder")
    except BackRetrievalError as err:
        raise UserError(str(err)) from None


def make_out_dir(path: str | Path) -> Path:
    """Create the output folder (once the inputs are validated: :func:`check_out_dir` checks it up front)."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{path}: cannot create the output folder ({err.strerror or err})") from None
    return Path(path)
