"""``globetrotter-data synth``: generate the built-in synthetic multilingual world."""
from __future__ import annotations

import argparse
import json
import shlex

from data_prep.config_io import config_dict, from_dict
from data_prep.errors import UserError

from .config import SynthConfig
from .lexicon import LANGUAGES

# flag dest -> SynthConfig field, for the plain-valued options
_FLAG_FIELDS = ("seed", "image_size", "train_images", "val_images", "test_images",
                "parallel_train_images", "adapt_images", "max_objects", "image_format", "workers")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``synth`` sub-command."""
    known = ", ".join(f"{code} ({lang.name}, {lang.script})" for code, lang in LANGUAGES.items())
    p = subparsers.add_parser(
        "synth",
        help="render the built-in synthetic multilingual world into shards",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Render scenes of simple objects and caption each in real languages from hand-written\n"
            "lexicons and grammars. Writes OUT/train, OUT/val (each image in ONE language),\n"
            "OUT/test (every image in ALL languages, tied by group), optional OUT/train-parallel and\n"
            "OUT/adapt (held-out languages), the ground-truth word dictionaries\n"
            "OUT/dictionary/<src>-<tgt>.txt (MUSE format) and OUT/world.yaml (the config used).\n"
            "The same config always gives byte-identical shards.\n\n"
            f"Languages: {known}."
        ),
        epilog="Example: globetrotter-data synth --out data/synth --train-images 20000 --held-out zh",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--config", metavar="YAML", help="SynthConfig YAML; flags and KEY=VALUE override it")
    p.add_argument("--seed", type=int, help="world seed (default 0)")
    p.add_argument("--languages", metavar="CODES", help="comma-separated training languages (default: all nine)")
    p.add_argument("--held-out", metavar="CODES",
                   help="comma-separated languages kept out of train/val; they appear in test/ and adapt/")
    p.add_argument("--image-size", type=int, dest="image_size", help="image side in pixels (default 64)")
    p.add_argument("--train-images", type=int, dest="train_images", help="train scenes, one language each (default 12000)")
    p.add_argument("--val-images", type=int, dest="val_images", help="val scenes, one language each (default 600)")
    p.add_argument("--test-images", type=int, dest="test_images", help="test scenes, captioned in every language (default 300)")
    p.add_argument("--parallel-train-images", type=int, dest="parallel_train_images",
                   help="extra train-parallel/ scenes in every training language, for the supervised baseline (default 0)")
    p.add_argument("--adapt-images", type=int, dest="adapt_images",
                   help="adapt/ scenes in the held-out languages (default 2000; only with --held-out)")
    p.add_argument("--max-objects", type=int, dest="max_objects", help="objects per scene, at most (default 3)")
    p.add_argument("--image-format", choices=("jpg", "png"), dest="image_format", help="image encoding (default jpg)")
    p.add_argument("--workers", type=int, help="rendering processes; 0: one per core of the machine; 1: in this "
                   "process, no pool (default 0)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --out that holds no earlier world (its train/ val/ test/ "
                        "train-parallel/ adapt/ shards, dictionary/ and world.yaml are replaced; other files stay). "
                        "An earlier world is written over without it")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="any SynthConfig field, e.g. p_mention_colour=0.5 pixel_noise=0")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> SynthConfig:
    """The SynthConfig of a parsed command line (YAML, then flags, then KEY=VALUE overrides).

    A bad value that came from a flag is reported as the flag the user typed (``--image-size 5: expected
    16..1024 pixels, got 5``); one from the YAML file or a KEY=VALUE override names the key."""
    typed: dict[str, str] = {}  # config key -> the flag and value as typed
    overrides = []
    for name in _FLAG_FIELDS:
        value = getattr(args, name)
        if value is not None:
            overrides.append(f"{name}={json.dumps(value)}")
            typed[name] = f"--{name.replace('_', '-')} {shlex.quote(str(value))}"
    for flag, name in (("languages", "languages"), ("held_out", "heldout_languages")):
        value = getattr(args, flag)
        if value is not None:
            overrides.append(f"{name}={json.dumps([c.strip() for c in value.split(',') if c.strip()])}")
            typed[name] = f"--{flag.replace('_', '-')} {shlex.quote(value)}"
    for item in args.overrides:  # a KEY=VALUE override wins over the flag: its key is the one to name
        typed.pop(item.split("=", 1)[0].strip(), None)
    data, where = config_dict(args.config, overrides + list(args.overrides))
    try:
        return from_dict(SynthConfig, data, where=where)
    except UserError as err:
        message = str(err)
        for key, flag in typed.items():
            head = f"{where}: {key}: "
            if message.startswith(head):
                raise UserError(f"{flag}: {message[len(head):]}") from None
        raise


def run(args: argparse.Namespace) -> int:
    """Run ``synth`` with the parsed options: write the world into ``--out`` and print a line per split; exit code 0."""
    from .world import generate  # heavy imports only when generating

    cfg = config_from_args(args)
    summary = generate(cfg, args.out, progress=not args.no_progress, overwrite=args.overwrite, flag="--out")
    print(f"synthetic world written to {summary['out_dir']} in {summary['seconds']:.1f} s "
          f"({summary['images_per_second']:.0f} images/s)")
    for name, split in summary["splits"].items():
        langs = " ".join(f"{code}:{n}" for code, n in split["languages"].items())
        print(f"  {name:<15} {split['images']:>7} images {split['samples']:>8} captions  {langs}")
    print(f"  dictionary      {summary['dictionary_pairs']} language pairs in {summary['out_dir']}/dictionary")
    return 0
