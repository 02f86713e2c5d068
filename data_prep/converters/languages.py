"""Language codes: ISO 639-1, optionally with a region or script subtag (BCP 47 style).

Every caption's language is checked against :data:`ISO_639_1` (the 183 two-letter codes
of ISO 639-1:2002 as maintained by the Library of Congress; the withdrawn ``bh`` is
left out). A region or script subtag is kept when given (``fa-AF`` is Dari in the
Globetrotter release, which names its language folders after Amazon Translate codes;
``zh-Hans``, ``es-419``); the primary code must still be ISO 639-1.

Codes that are not ISO 639-1 but that a known layout uses are mapped by that layout's
reader, never here: XTD10 names its Japanese file ``test_1kcaptions_jp.txt`` (``jp`` is
the ISO 3166 *country* code of Japan; the language is ``ja``), so the XTD10 reader maps
``jp`` -> ``ja`` and nothing else does. A ``jp`` anywhere else is reported as unknown.
"""
from __future__ import annotations

import re
from functools import lru_cache

# ISO 639-1 code -> English name.
ISO_639_1: dict[str, str] = {
    "aa": "Afar", "ab": "Abkhazian", "ae": "Avestan", "af": "Afrikaans", "ak": "Akan",
    "am": "Amharic", "an": "Aragonese", "ar": "Arabic", "as": "Assamese", "av": "Avaric",
    "ay": "Aymara", "az": "Azerbaijani", "ba": "Bashkir", "be": "Belarusian", "bg": "Bulgarian",
    "bi": "Bislama", "bm": "Bambara", "bn": "Bengali", "bo": "Tibetan", "br": "Breton",
    "bs": "Bosnian", "ca": "Catalan", "ce": "Chechen", "ch": "Chamorro", "co": "Corsican",
    "cr": "Cree", "cs": "Czech", "cu": "Church Slavic", "cv": "Chuvash", "cy": "Welsh",
    "da": "Danish", "de": "German", "dv": "Divehi", "dz": "Dzongkha", "ee": "Ewe",
    "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish", "et": "Estonian",
    "eu": "Basque", "fa": "Persian", "ff": "Fulah", "fi": "Finnish", "fj": "Fijian",
    "fo": "Faroese", "fr": "French", "fy": "Western Frisian", "ga": "Irish", "gd": "Scottish Gaelic",
    "gl": "Galician", "gn": "Guarani", "gu": "Gujarati", "gv": "Manx", "ha": "Hausa",
    "he": "Hebrew", "hi": "Hindi", "ho": "Hiri Motu", "hr": "Croatian", "ht": "Haitian",
    "hu": "Hungarian", "hy": "Armenian", "hz": "Herero", "ia": "Interlingua", "id": "Indonesian",
    "ie": "Interlingue", "ig": "Igbo", "ii": "Sichuan Yi", "ik": "Inupiaq", "io": "Ido",
    "is": "Icelandic", "it": "Italian", "iu": "Inuktitut", "ja": "Japanese", "jv": "Javanese",
    "ka": "Georgian", "kg": "Kongo", "ki": "Kikuyu", "kj": "Kuanyama", "kk": "Kazakh",
    "kl": "Kalaallisut", "km": "Khmer", "kn": "Kannada", "ko": "Korean", "kr": "Kanuri",
    "ks": "Kashmiri", "ku": "Kurdish", "kv": "Komi", "kw": "Cornish", "ky": "Kyrgyz",
    "la": "Latin", "lb": "Luxembourgish", "lg": "Ganda", "li": "Limburgish", "ln": "Lingala",
    "lo": "Lao", "lt": "Lithuanian", "lu": "Luba-Katanga", "lv": "Latvian", "mg": "Malagasy",
    "mh": "Marshallese", "mi": "Maori", "mk": "Macedonian", "ml": "Malayalam", "mn": "Mongolian",
    "mr": "Marathi", "ms": "Malay", "mt": "Maltese", "my": "Burmese", "na": "Nauru",
    "nb": "Norwegian Bokmål", "nd": "North Ndebele", "ne": "Nepali", "ng": "Ndonga", "nl": "Dutch",
    "nn": "Norwegian Nynorsk", "no": "Norwegian", "nr": "South Ndebele", "nv": "Navajo", "ny": "Chichewa",
    "oc": "Occitan", "oj": "Ojibwa", "om": "Oromo", "or": "Oriya", "os": "Ossetian",
    "pa": "Punjabi", "pi": "Pali", "pl": "Polish", "ps": "Pashto", "pt": "Portuguese",
    "qu": "Quechua", "rm": "Romansh", "rn": "Rundi", "ro": "Romanian", "ru": "Russian",
    "rw": "Kinyarwanda", "sa": "Sanskrit", "sc": "Sardinian", "sd": "Sindhi", "se": "Northern Sami",
    "sg": "Sango", "si": "Sinhala", "sk": "Slovak", "sl": "Slovenian", "sm": "Samoan",
    "sn": "Shona", "so": "Somali", "sq": "Albanian", "sr": "Serbian", "ss": "Swati",
    "st": "Southern Sotho", "su": "Sundanese", "sv": "Swedish", "sw": "Swahili", "ta": "Tamil",
    "te": "Telugu", "tg": "Tajik", "th": "Thai", "ti": "Tigrinya", "tk": "Turkmen",
    "tl": "Tagalog", "tn": "Tswana", "to": "Tonga", "tr": "Turkish", "ts": "Tsonga",
    "tt": "Tatar", "tw": "Twi", "ty": "Tahitian", "ug": "Uyghur", "uk": "Ukrainian",
    "ur": "Urdu", "uz": "Uzbek", "ve": "Venda", "vi": "Vietnamese", "vo": "Volapük",
    "wa": "Walloon", "wo": "Wolof", "xh": "Xhosa", "yi": "Yiddish", "yo": "Yoruba",
    "za": "Zhuang", "zh": "Chinese", "zu": "Zulu",
}

# primary code, then an optional region (2 letters or 3 digits) or script (4 letters) subtag
_TAG = re.compile(r"^([A-Za-z]{2})(?:[-_]([A-Za-z]{2}|[0-9]{3}|[A-Za-z]{4}))?$")


@lru_cache(maxsize=4096)
def normalize_language(code: str) -> str | None:
    """Return the canonical form of a language code, or ``None`` when it is not valid.

    ``"DE"`` -> ``"de"``, ``"fa_af"`` -> ``"fa-AF"``, ``"zh-hans"`` -> ``"zh-Hans"``;
    ``"xx"``, ``"jp"``, ``"eng"``, ``""`` -> ``None``.
    """
    match = _TAG.match(code.strip())
    if match is None:
        return None
    primary, sub = match.group(1).lower(), match.group(2)
    if primary not in ISO_639_1:
        return None
    if sub is None:
        return primary
    if len(sub) == 4:
        return f"{primary}-{sub.title()}"
    return f"{primary}-{sub.upper()}"


def parse_language_list(text: str) -> list[str]:
    """Parse a comma-separated list of codes (a command-line value); ``ValueError`` names the bad one (unknown, or
    given twice, as every command of the project refuses it)."""
    codes = []
    for raw in text.split(","):
        if not raw.strip():
            continue
        code = normalize_language(raw)
        if code is None:
            raise ValueError(f"unknown language code {raw.strip()!r} (expected ISO 639-1, e.g. en, de, zh, or fa-AF)")
        if code in codes:
            raise ValueError(f"{raw.strip()!r} given twice in {text!r} (as {code}); expected each language once")
        codes.append(code)
    if not codes:
        raise ValueError("empty language list")
    return codes
