"""The built-in synthetic multilingual world (docs/design.md section 4).

Scenes of 1-3 kinds of objects (shape, colour, size, position, counts) on plain,
gradient, striped, checkered or noisy backgrounds, rendered with Pillow, each captioned
in real languages (en, de, fr, es, ru, el, ja, zh, ar: 5 non-Latin scripts) from
hand-written lexicons and small grammars. Captions mention a random subset of what is
visible. Written as the project's shards (train/val: one language per image; test: all
languages, tied by group), plus MUSE-format ground-truth dictionaries.

    from data_prep.synth import SynthConfig, generate
    generate(SynthConfig(train_images=2000), "data/synth")
"""
from .config import SynthConfig
from .lexicon import LANGUAGES, Language, known_languages
from .world import generate

__all__ = ["LANGUAGES", "Language", "SynthConfig", "generate", "known_languages"]
