"""Converters from public image-caption layouts to the shard format (docs/design.md section 3).

Readers (one per layout) turn files into :class:`Caption` records and :class:`Issue` items;
:func:`convert` checks them, plans the splits (Globetrotter rule), decodes and resizes the
images in a process pool and writes the shards, accounting for every record in a
:class:`ConversionReport`. The command line is ``globetrotter-data {multi30k, flickr8k,
globetrotter, xtd10, folder}`` (:mod:`data_prep.converters.cli`); ``globetrotter-data more-captions``
(:mod:`data_prep.converters.more_captions`) adds the sources' other captions of each train image,
in its own language, to a converted dataset.
"""
from .common import Caption
from .flickr8k import read_flickr8k
from .folder import read_caption_table
from .globetrotter_layout import read_globetrotter
from .images import ImageResolver, ImageSpec, prepare_image
from .languages import ISO_639_1, normalize_language
from .multi30k import read_multi30k
from .options import ConvertOptions
from .pipeline import convert
from .report import ConversionReport, Issue
from .splits import assign_languages, plan_splits
from .xtd10 import read_xtd10

__all__ = [
    "Caption", "ConversionReport", "ConvertOptions", "ISO_639_1", "ImageResolver", "ImageSpec", "Issue",
    "assign_languages", "convert", "normalize_language", "plan_splits", "prepare_image", "read_caption_table",
    "read_flickr8k", "read_globetrotter", "read_multi30k", "read_xtd10",
]
