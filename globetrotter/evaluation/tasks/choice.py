"""The choice an ``eval.py select`` record made, read back: :class:`Choice` and :func:`read_choice`."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from backretrieval.errors import option, said
from globetrotter.errors import UserError
from globetrotter.shell import program_name

from ..models import ModelLike
from ..ranking import Ranking


def select_command() -> str:
    """This command as messages name it: ``eval.py select`` from the repository's script, else
    ``globetrotter-eval select`` (:func:`globetrotter.shell.program_name`)."""
    return f"{program_name('eval')} select"


def read_record(path: str | Path, flag: str) -> dict:
    """A ``select`` record's JSON, for the option ``flag`` (how messages name it: the parameter as
    :func:`~backretrieval.errors.option` gives it, or a script's flag; a one-line error naming the file when it is
    missing or not JSON)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: a folder; {flag} takes the JSON record that `{select_command()}` wrote")
    if not path.is_file():
        raise UserError(f"{path}: no such file ({flag} takes the JSON record that `{select_command()}` wrote)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text (byte {err.start}), so not a record of `{select_command()}` (the JSON "
                        "it writes)") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}:{err.colno}: not JSON ({err.msg}); expected the record "
                        f"`{select_command()}` wrote") from None


@dataclass(frozen=True)
class Choice:
    """What an ``eval.py select`` record chose: the ranking, and the reference captions its statistics came from (a
    split and a per-language cap), for the model and languages it was chosen for. Scoring test with the same
    ranking and reference applies exactly that choice: ``evaluate_sentence_translation(model, split, choice=c)``,
    which refuses another model, other languages, or reference captions that changed since (:meth:`check`)."""

    ranking: Ranking
    reference: str
    reference_size: int | None
    model: str | None = None
    languages: tuple[str, ...] | None = None
    reference_sha256: str | None = None
    source: str = "the select record"
    checkpoint: str | None = None
    """The checkpoint whose weights the choice was made for (``None``: a baseline)."""
    weights_sha256: str | None = None
    """Those weights' file digest (``None``: a baseline, or a record from before it was kept)."""
    oracle: bool = False
    """Made on parallel val text (``experiments/oracle_ranking.py``): a ceiling, not a choice a method can make."""

    @classmethod
    def from_record(cls, data: dict, source: str = "the select record") -> "Choice":
        """The choice of a ``select`` record (``Result.to_record()`` of :func:`select_ranking`, or its JSON read back;
        the oracle's records have the same form). A record of another form is a one-line error."""
        if not isinstance(data, dict) or not all(isinstance(data.get(k), dict) for k in ("details", "config")):
            raise UserError(f"{source}: not a record of `{select_command()}` (expected a JSON object with "
                            f"details and config)")
        model, languages = data.get("model") or {}, data.get("languages")
        reference = data["details"].get("reference") or {}
        if not isinstance(model, dict) or not isinstance(reference, dict):
            raise UserError(f"{source}: not a record of `{select_command()}` (model and details.reference: objects)")
        return cls(Ranking.from_dict(data["details"]["chosen"], source), str(data["config"]["reference"]),
                   data["config"]["reference_size"], model.get("path"),
                   None if languages is None else tuple(sorted(languages)), reference.get("sha256"), source,
                   model.get("checkpoint"), model.get("weights_sha256"), bool(data["config"].get("oracle")))

    def check_model(self, model: ModelLike, info: dict) -> None:
        """:meth:`check` of the model an evaluation was given (``model``, a spec or an encoder object) and resolved
        to (``info``, its record entry): a model given by its spec, or a baseline object, by the path its record
        names; a loaded run by the checkpoint it holds."""
        by_path = isinstance(model, (str, Path)) or info["checkpoint"] is None
        self.check(model=info["path"] if by_path else None, checkpoint=info["checkpoint"],
                   weights_sha256=info.get("weights_sha256"))

    def check(self, *, model: str | None = None, checkpoint: str | None = None, languages: Sequence[str] | None = None,
              reference: dict | None = None, weights_sha256: str | None = None) -> None:
        """A one-line error when the choice is applied to another ``model`` (its record's path), other weights (the
        ``checkpoint`` a loaded model holds, or the digest of its weights file: a run folder that has saved a better
        or later one since), other ``languages``, or a reference pool (its ``record``) whose captions are not the
        ones it was chosen with."""
        again = f"choose again with `{select_command()}` for this evaluation"
        same_weights = checkpoint is not None and checkpoint == self.checkpoint  # e.g. RUN and RUN/checkpoints/best
        if model is not None and self.model is not None and model != self.model and not same_weights:
            raise UserError(f"{self.source} chose a ranking for {self.model}, not {model}; {again}")
        if checkpoint is not None and self.model is not None and checkpoint != self.checkpoint:
            chosen_for = self.checkpoint or self.model
            raise UserError(f"{self.source} chose a ranking for the weights of {chosen_for}, not those of {checkpoint} "
                            f"(has the run saved another checkpoint since?); {again}")
        if weights_sha256 and self.weights_sha256 and weights_sha256 != self.weights_sha256:
            raise UserError(f"{self.source} chose a ranking for other weights than {checkpoint or model} holds now "
                            f"(sha256 {self.weights_sha256[:12]}, now {weights_sha256[:12]}: has the run saved another "
                            f"checkpoint there since?); {again}")
        if languages is not None and self.languages is not None and tuple(sorted(languages)) != self.languages:
            chosen_languages = said(f"--languages {','.join(self.languages)}", f"languages={list(self.languages)}")
            raise UserError(f"{self.source} chose a ranking for {','.join(self.languages)}, not "
                            f"{','.join(sorted(languages))}: evaluate {chosen_languages}, or {again} "
                            f"({option('languages')})")
        if reference is not None and self.reference_sha256 is not None and reference["sha256"] != self.reference_sha256:
            raise UserError(f"{self.source}: the captions of {reference['split']} are not those the ranking was "
                            f"chosen with (sha256 {reference['sha256'][:12]}, the record's {self.reference_sha256[:12]}); "
                            f"{again}")


def read_choice(record: str | Path) -> Choice:
    """The :class:`Choice` of a ``select`` record's JSON file."""
    data = read_record(record, option("ranking"))
    try:
        return Choice.from_record(data, source=str(record))
    except KeyError as err:
        raise UserError(f"{record}: not a record of `{select_command()}` (missing key {err.args[0]!r})") from None
    except (ValueError, TypeError, AttributeError) as err:
        raise UserError(f"{record}: not a record of `{select_command()}` ({err})") from None
