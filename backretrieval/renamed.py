"""Old spellings of the public API, kept working for one release: each warns once per call, naming the new one.

One spelling per concept (``languages=``, ``bootstrap=``, ``to_record()``, ...): a keyword or method renamed to it
keeps its old name through :func:`renamed_keywords` (a function's or method's old keyword) or :class:`RenamedMethod`
(a method's old name). ``globetrotter`` uses them too (it may import ``backretrieval``; not the other way round).
Each old name is removed in the release after the one that renamed it.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated and will be removed in the next release: use {new}", DeprecationWarning,
                  stacklevel=3)


def renamed_keywords(**new_of_old: str) -> Callable[[F], F]:
    """Decorator: ``@renamed_keywords(langs="languages")`` accepts ``langs=`` as ``languages=`` with one
    DeprecationWarning; both at once is a TypeError. The signature shown (``inspect.signature``, ``help``) is the
    function's own, with the new names only; ``__renamed_keywords__`` lists the old ones."""

    def wrap(func: F) -> F:
        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            for old, new in new_of_old.items():
                if old in kwargs:
                    where = f"{func.__module__}.{func.__qualname__}"
                    if new in kwargs:
                        raise TypeError(f"{where}() got {old}= and {new}=: pass {new}= only")
                    _warn(f"{where}({old}=...)", f"{new}=")
                    kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        call.__renamed_keywords__ = dict(new_of_old)  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap


class RenamedMethod:
    """A class attribute ``old = RenamedMethod("new")``: ``obj.old(...)`` warns once (DeprecationWarning) and
    returns ``obj.new(...)``."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.old = new  # set by __set_name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name

    def __get__(self, obj: object, owner: type | None = None) -> Callable[..., Any]:
        target = getattr(obj if obj is not None else owner, self.new)

        @functools.wraps(target)
        def call(*args: Any, **kwargs: Any) -> Any:
            cls = owner or type(obj)
            _warn(f"{cls.__module__}.{cls.__qualname__}.{self.old}()", f"{self.new}()")
            return target(*args, **kwargs)

        return call
