"""What every spec is: a frozen dataclass whose copies are checked (an unknown option is an
error that suggests close ones) and whose config is plain Python, JSON-serialisable."""

import dataclasses
import difflib


def _suggest(unknown, known):
    close = difflib.get_close_matches(unknown, known, n=3)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def option(default, help, **metadata):
    """A spec field with its ``help`` (its one line in the training commands' --help) and any
    other metadata (``ViTSpec``'s role)."""
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


class FrozenSpec:
    """What both specs share: checked replacement and a JSON-friendly config."""

    def _settle(self, name, value):
        """Sets field ``name`` to the one form of a value given in another (from ``__post_init__``).
        The dataclass is frozen, which guards ``__setattr__`` only: the instance's own ``__dict__``
        takes it (the specs have no ``__slots__``)."""
        vars(self)[name] = value

    def replace(self, **changes):
        """A copy with ``changes`` applied; an unknown name is an error that suggests close ones."""
        self.check_names(changes)
        return dataclasses.replace(self, **changes)

    @classmethod
    def check_names(cls, names):
        """Raises ``ValueError`` for a name that is not a field, suggesting close ones."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(names) - set(known))
        if unknown:
            hints = "".join(_suggest(name, known) for name in unknown)
            raise ValueError(f"{cls.__name__}: unknown option(s) {unknown}.{hints} Known options: {', '.join(known)}.")

    def to_config(self):
        """Plain Python values (lists for tuples, a dict for a nested spec): JSON-serialisable."""
        return _plain(dataclasses.asdict(self))


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value
