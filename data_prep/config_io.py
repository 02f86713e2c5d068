"""Typed configs: dataclasses loaded from YAML, overridden from the command line, validated.

A config is a tree of dataclasses. :func:`load_config` reads a YAML file into it,
applies ``key.sub=value`` overrides (values parsed as YAML, so ``train.lr=3e-4`` is a
float and ``model.pretrained=null`` is ``None``), and checks every key and type: an
unknown key or a wrong type is a :class:`~data_prep.errors.UserError` naming the
file and the dotted key. :func:`save_config` writes the resolved config back to YAML,
so every run can be reproduced from the file saved beside its outputs. :func:`written_keys` tells the keys the
file itself and the overrides set from those it inherits from its ``_base_``.

It lives in the data layer, at the bottom of the dependency graph (docs/design.md section 2), because the
synthetic world's config (:class:`data_prep.synth.config.SynthConfig`) is loaded and saved with it too;
:mod:`globetrotter.config_io` re-exports it for the training, adaptation and zero-shot configs.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Sequence, TypeVar, Union, get_args, get_origin

import yaml

from .errors import UserError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")  # a config class: a dataclass


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in get_args(tp))}]"
    return getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, key: str, where: str) -> Any:
    """Check ``value`` against the annotation ``tp`` and convert it (int -> float, dict -> dataclass)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # an annotation: a class, never an instance
        if not isinstance(value, dict):
            raise UserError(f"{where}: key '{key}' must be a mapping of {tp.__name__} fields, got {value!r}")
        return from_dict(tp, value, where=where, prefix=key)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, key, where)
            except UserError:
                continue
        raise UserError(f"{where}: key '{key}' expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        if value in get_args(tp) and not (isinstance(value, bool) and True not in get_args(tp)):
            return value
        if isinstance(value, bool):  # YAML 1.1 reads no/off/yes/on as booleans: the choice that was written
            for choice in get_args(tp):
                if isinstance(choice, str) and yaml.safe_load(choice) is value:
                    return choice
        raise UserError(f"{where}: key '{key}' expected one of {_type_name(tp)}, got {value!r}")
    if origin in (list, tuple, Sequence, typing.Sequence):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{where}: key '{key}' expected a list, got {value!r}")
        (item_tp, *_) = get_args(tp) or (Any,)
        items = [_convert(v, item_tp, f"{key}[{i}]", where) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{where}: key '{key}' expected a mapping, got {value!r}")
        _, val_tp = get_args(tp) or (Any, Any)
        return {k: _convert(v, val_tp, f"{key}.{k}", where) for k, v in value.items()}
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "3e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type) and isinstance(value, tp):
        return value
    read_as = " (YAML reads yes/no/on/off/true/false as a boolean)" if isinstance(value, bool) else ""
    raise UserError(f"{where}: key '{key}' expected {_type_name(tp)}, got {value!r}{read_as}")


def key_of(f: dataclasses.Field) -> str:
    """A field's key in YAML and overrides: its name, or ``metadata["key"]`` where the name cannot be
    the key (``adapt.from``: ``from`` is a Python keyword, the field is ``from_run``)."""
    return f.metadata.get("key", f.name)


def from_dict(cls: type[T], data: dict, where: str = "<config>", prefix: str = "") -> T:
    """Build dataclass ``cls`` from a nested dict, rejecting unknown keys and wrong types."""
    hints = typing.get_type_hints(cls)
    fields = {key_of(f): f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if name not in fields:
            known = ", ".join(sorted(fields))
            raise UserError(f"{where}: unknown key '{key}' (expected one of: {known})")
        kwargs[fields[name].name] = _convert(value, hints[fields[name].name], key, where)
    try:
        obj = cls(**kwargs)
    except TypeError as err:  # a required field is missing
        raise UserError(f"{where}: {prefix or cls.__name__}: {err}") from None
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ValueError as err:
            named = not prefix or str(err).startswith(f"{prefix}.")  # the message names its key already
            raise UserError(f"{where}: {'' if named else prefix + ': '}{err}") from None
    return obj


def to_dict(obj: Any) -> Any:
    """Plain-Python (YAML-safe) view of a dataclass tree."""
    if dataclasses.is_dataclass(obj):
        return {key_of(f): to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def parse_overrides(overrides: Sequence[str]) -> dict:
    """Turn ``["train.lr=1e-3", "model.layers=2"]`` into a nested dict (values parsed as YAML)."""
    tree: dict = {}
    for item in overrides:
        if "=" not in item:
            raise UserError(f"override '{item}': expected key.sub=value")
        key, raw = item.split("=", 1)
        key = key.strip().lstrip("-")
        if not key:
            raise UserError(f"override '{item}': empty key")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as err:
            if raw.strip()[:1] in "[{":  # meant as a list or mapping: say it does not parse
                problem = getattr(err, "problem", None) or str(err).splitlines()[0]
                raise UserError(f"override '{item}': malformed YAML ({problem})") from None
            value = raw
        node = tree
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError(f"override '{item}': {'.'.join(parts[:depth + 1])} is given a value by another "
                                f"override, so it has no key {parts[depth + 1]!r}")
        node[parts[-1]] = value
    return tree


def merge(base: dict, extra: dict, _depth: int = 0) -> dict:
    """Recursive dict merge: values in ``extra`` win; nested mappings are merged, except that an empty mapping
    below the sections clears the key (``model.image_backbone_args={}``: merged, it changed nothing)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and (value or _depth == 0):
            out[key] = merge(out[key], value, _depth + 1)
        else:
            out[key] = value
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, refusing a key given twice in one mapping (YAML keeps the last in silence, so
    ``steps: 5`` and, further down, ``steps: 6`` trained 6 steps with no word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict = {}
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (lines {seen[key]} and {key_node.start_mark.line + 1})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def read_yaml(path: str | Path) -> dict:
    """Read a YAML mapping, with one-line errors for a missing or malformed file (a key given twice included)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: a folder; expected a YAML config file")
    if not path.is_file():
        raise UserError(f"{path}: config file not found")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except yaml.YAMLError as err:
        mark, opened = getattr(err, "problem_mark", None), getattr(err, "context_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context = getattr(err, "context", None)
        if context and opened is not None and mark is not None and opened.line != mark.line:  # an unclosed [ or {
            problem += f"; {context} opened on line {opened.line + 1}"
        raise UserError(f"{path}:{line}: malformed YAML ({problem})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a YAML mapping at the top level, got {type(data).__name__}")
    return data


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Load ``cls`` from YAML ``path`` (defaults when None) with ``key=value`` overrides applied.

    A YAML file may name a base config with ``_base_: other.yaml`` (relative to itself);
    the file's keys are merged over the base's.
    """
    data, where = config_dict(path, overrides)
    return from_dict(cls, data, where=where)


def config_dict(path: str | Path | None = None, overrides: Sequence[str] = ()) -> tuple[dict, str]:
    """The raw mapping :func:`load_config` builds from YAML ``path`` (``_base_`` resolved) and the
    overrides, unchecked, and a description of where it came from (for error messages)."""
    data: dict = {}
    where = "<defaults>"
    if path is not None:
        data = _read_with_bases(Path(path), seen=())
        where = str(path)
    if overrides:
        data = merge(data, parse_overrides(overrides))
        where = f"{where} + overrides"
    return data, where


def written_keys(path: str | Path | None = None, overrides: Sequence[str] = ()) -> set[str]:
    """The dotted keys that the YAML file ``path`` itself and the ``overrides`` set, not those only a ``_base_`` file
    (or its own base) gives: what the user wrote for this run. A mapping's keys are listed one by one
    (``model: {layers: 2}`` is ``model.layers``); an empty one is its own key (``model.image_backbone_args={}``)."""
    data = read_yaml(path) if path is not None else {}
    data.pop("_base_", None)
    return set(_dotted(merge(data, parse_overrides(overrides))))


def _dotted(tree: dict, prefix: str = "") -> list[str]:
    out: list[str] = []
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        out += _dotted(value, name) if isinstance(value, dict) and value else [name]
    return out


def _read_with_bases(path: Path, seen: tuple) -> dict:
    if path.resolve() in seen:
        raise UserError(f"{path}: _base_ chain loops back on itself")
    data = read_yaml(path)
    base = data.pop("_base_", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise UserError(f"{path}: key '_base_' expected a file name, got {base!r}")
    if not (path.parent / base).is_file():
        raise UserError(f"{path}: _base_ {base!r}: config file {path.parent / base} not found")
    return merge(_read_with_bases(path.parent / base, seen + (path.resolve(),)), data)


def save_config(obj: Any, path: str | Path, header: str = "") -> Path:
    """Write the resolved config as YAML (atomically) and return the path; ``header``: lines written before it
    (``# ...`` comments, so the file still loads as the config)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(header + yaml.safe_dump(to_dict(obj), sort_keys=False, allow_unicode=True), encoding="utf-8")
    tmp.replace(path)
    return path
