"""``train.py`` / ``globetrotter-train``: train a Globetrotter model from a YAML config."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from ..errors import UserError, run_cli
from ..shell import program_name, started_from_repository

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
UNSAVED = 3
"""Exit code of a run that trained to the end but could not write its final checkpoint (2: a user error, nothing
trained; 130: interrupted)."""


def build_parser() -> argparse.ArgumentParser:
    """The ``train.py`` / ``globetrotter-train`` parser: ``--config``, ``--resume`` and the config overrides."""
    # named as it was started: `train.py` (the repository's script) or `globetrotter-train` (the console script,
    # and `python -m globetrotter.training.cli`, whose own file name would say nothing)
    train, evaluate = program_name("train"), program_name("eval")
    launch = "train.py" if started_from_repository() else "-m globetrotter.training.cli"
    p = argparse.ArgumentParser(
        prog=train,
        description="Train a Globetrotter model: a shared-BPE transformer text encoder and a timm image encoder "
        "(model.image_backbone, e.g. resnet18) whose captions in many languages align through "
        "the images they describe (losses: SimCLR image loss L_v, "
        "cross-modal L_x, transitive text-text L_t, token cloze L_c). Runs on CPU, one GPU, or many with "
        f"`accelerate launch {launch} ...`. With no arguments it runs configs/quickstart.yaml: generates the "
        "built-in synthetic multilingual world if absent, trains a small model in minutes on CPU and chooses its best "
        "checkpoint by BackRetrieval on the val split (no parallel text). At the end it prints two commands: "
        f"`{evaluate} select`, which chooses the sentence ranking on val, then `{evaluate} sentence --ranking RECORD`, "
        "which scores the test split once with that choice.",
        epilog=f"Overrides use dotted keys, e.g. `{train} --config configs/quickstart.yaml steps=200 optim.lr=3e-4 "
        "loss.transitive=official`. Adapt a trained run to a language it never saw (paper appendix A.2): "
        f"`{train} adapt.from=RUN adapt.language=el [--config FILE] [adapt.epochs=2 ...]`: the run's saved config "
        "with FILE and the overrides over it; one epoch over the new language's captions (split adapt.split) by "
        "default.",
    )
    p.add_argument("--config", default=None, help=f"YAML config (default: configs/{DEFAULT_CONFIG.name}; with "
                   f"adapt.from, the run's own)")
    p.add_argument("--resume", default=None, metavar="latest|DIR",
                   help="continue a run: 'latest' (the run folder's newest checkpoint) or a checkpoint folder")
    p.add_argument("overrides", nargs="*", metavar="key.sub=value", help="config overrides (values parsed as YAML)")
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_intermixed_args(argv)  # overrides may stand before or after the options
    from backretrieval.errors import cli_option_names

    with cli_option_names():  # the refusals of train()'s resume name --resume X, as typed here, not resume=X
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Train as ``args`` (the parsed command line) say; the exit code."""
    adapting = any(o.split("=", 1)[0].lstrip("-").strip() == "adapt.from" for o in args.overrides)
    if args.config is None and not adapting and not DEFAULT_CONFIG.is_file():
        raise UserError(f"no --config, and the default {DEFAULT_CONFIG} is not there (the configs ship with the "
                        f"repository: install it with `pip install -e .` from a clone, or pass --config FILE)")
    config = args.config or (None if adapting else DEFAULT_CONFIG)
    from .adapt import load_adapt_config, trained_languages  # (adapt.from: the starting run's config under FILE)
    if args.resume:  # an adaptation does not resume: said before its config's own checks (a saved one's included)
        from ..config_io import config_dict
        from .adapt.start import resume_refused

        section = config_dict(config, args.overrides)[0].get("adapt")
        if isinstance(section, dict) and section.get("from"):
            raise UserError(resume_refused())
    cfg = load_adapt_config(config, args.overrides)
    if args.resume and not cfg.adapt.from_run:  # an adaptation is refused a resume by train()
        from ..config_io import config_dict
        from .resume import keep_run_settings

        first = os.environ.get("RANK", "0") == "0"  # one notice, not one per process
        cfg = keep_run_settings(cfg, args.resume, config_dict(args.config, args.overrides)[0],
                                log=print if first else lambda line: None)
    from ..config_io import written_keys
    from .trainer import train
    from .report import print_summary

    try:  # the keys the user wrote: a key only the config's _base_ (or adapt.from's run) sets is never warned about
        result = train(cfg, resume=args.resume, written=written_keys(config, args.overrides))
    except KeyboardInterrupt:
        _say_where_to_resume(cfg.run_dir)
        raise
    print_summary(result, Path(cfg.data.root) / cfg.data.test_split if cfg.data.test_split else None,
                  Path(cfg.data.root) / cfg.data.val_split, Path(cfg.data.root) / cfg.data.train_split,
                  trained_languages(cfg))
    return _unsaved_final_checkpoint(result)


def _unsaved_final_checkpoint(result: dict) -> int:
    """:data:`UNSAVED`, and one line naming the last checkpoint there is, when the run's final checkpoint was not
    written (a full disk: its own line said why); else 0."""
    saved, step = result.get("checkpoints") or {}, result["step"]
    latest = saved.get("latest")
    if latest == step:
        return 0
    if os.environ.get("RANK", "0") == "0":
        from .checkpoint import checkpoint_root, step_name

        root = checkpoint_root(result["run_dir"])
        if saved.get("best") == step:  # validated at the last step: best/ holds the final weights
            kept = f"{root / 'best'} holds the weights of step {step}"
        elif latest is not None:
            kept = (f"the last checkpoint is step {latest} ({root / step_name(latest)}): free disk space, then "
                    f"continue the run with the same command and --resume latest")
        else:
            kept = "no checkpoint was written: free disk space and run it again"
        print(f"error: {result['run_dir']}: the final checkpoint (step {step}) was not written; {kept}",
              file=sys.stderr)
    return UNSAVED


def _say_where_to_resume(run_dir: Path) -> None:
    """On Ctrl-C: the checkpoint a resume would continue from (the steps after it are lost), or that there is none,
    in one line from the first process."""
    if os.environ.get("RANK", "0") != "0":
        return
    from .checkpoint import furthest, read_state

    try:
        source = furthest(run_dir)
    except UserError:
        print(f"{run_dir}: stopped before its first checkpoint; nothing to resume", file=sys.stderr)
        return
    print(f"{run_dir}: the last checkpoint is step {read_state(source).get('step')} ({source.name}); continue the run "
          f"with the same command and --resume latest", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point; never returns: exits with the command's exit code."""
    raise SystemExit(run_cli(_main, argv))


if __name__ == "__main__":  # python -m globetrotter.training.cli, accelerate launch -m globetrotter.training.cli
    main()
