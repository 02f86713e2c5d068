"""Typed configs: dataclasses loaded from YAML, overridden from the command line, validated.

The implementation is :mod:`data_prep.config_io` (the data layer, at the bottom of the dependency graph: the
synthetic world's config is loaded with it too); this module re-exports it for the training, adaptation and
zero-shot configs.
"""
from __future__ import annotations

from data_prep.config_io import (config_dict, from_dict, key_of, load_config, merge, parse_overrides, read_yaml,
                                 save_config, to_dict, written_keys)

__all__ = ["config_dict", "from_dict", "key_of", "load_config", "merge", "parse_overrides", "read_yaml",
           "save_config", "to_dict", "written_keys"]
