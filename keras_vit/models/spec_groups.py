"""Nested option groups of a spec (``ViTSpec.resnet``, ``ViTSpec.rope``): a group is a spec
of its own in one field, set whole, by its key field's value alone (``rope="axial"``), or
field by field as ``<group>_<field>`` (``rope_temperature=100.0``), the flat names that
configs written before the groups use."""

import dataclasses
import typing


@dataclasses.dataclass(frozen=True)
class Group:
    """One nested group: the field ``name`` holds a ``kind`` (a ``FrozenSpec``) or None; its
    ``key`` field's value alone stands for the group; ``flat``: its fields are options (and
    flags) of their own, ``<name>_<field>``."""

    name: str
    kind: type
    key: str
    flat: bool = False


@dataclasses.dataclass(frozen=True)
class Option:
    """One option as users give it (``ViTSpec.options()``): its name, type and metadata."""

    name: str
    type: typing.Any
    metadata: dict


def default(kind, name):
    """The default of field ``name`` of spec class ``kind`` (None where it has none)."""
    value = next(f for f in dataclasses.fields(kind) if f.name == name).default
    return None if value is dataclasses.MISSING else value


def settled(group, value):
    """A group's value in its one form: a ``kind``, or None (from a config's dict or the key
    field's value alone)."""
    if value is None or isinstance(value, group.kind):
        return value
    return group.kind(**value) if isinstance(value, dict) else group.kind(**{group.key: value})


def options(spec_class, groups):
    """Every option of ``spec_class`` by the name a user gives it: its fields, and each field
    of a flat group as ``<group>_<field>``, the key field as the group's name."""
    flat = {g.name: g for g in groups if g.flat}
    found = {}
    for f in dataclasses.fields(spec_class):
        if f.name not in flat:
            found[f.name] = Option(f.name, f.type, f.metadata)
            continue
        group = flat[f.name]
        for inner in dataclasses.fields(group.kind):
            is_key = inner.name == group.key
            name = f.name if is_key else f"{f.name}_{inner.name}"
            help = f.metadata["help"] if is_key else inner.metadata["help"]
            found[name] = Option(name, inner.type | None if is_key else inner.type, {**f.metadata, "help": help})
    return found


def in_group(name, group_name):
    """Whether option ``name`` is of the group ``group_name``: its key (the group's own name)
    or one of its fields, ``<group>_<field>``."""
    return name == group_name or name.startswith(group_name + "_")


def option(spec, name, groups):
    """The value of option ``name`` (an ``options()`` name) of ``spec``; a flat group's field
    where the group is None is its default."""
    for group in groups:
        if group.flat and in_group(name, group.name):
            inner = group.key if name == group.name else name[len(group.name) + 1 :]
            value = getattr(spec, group.name)
            return getattr(value, inner) if value is not None else default(group.kind, inner)
    return getattr(spec, name)


def grouped(spec, group, changes):
    """``changes`` with a group's ``<name>_<field>`` changes made one change of its field.

    A group that does not exist is made of the fields given where its key field is given
    or has a default (a ResNet stem); else, as after ``<name>_<key>=None``, its fields may
    be given at their defaults alone (a value for a group that is not there is an error)."""
    name, kind, key = group.name, group.kind, group.key
    prefix = name + "_"
    fields = {k[len(prefix) :]: changes.pop(k) for k in list(changes) if k.startswith(prefix)}
    if changes.get(name) is not None and not isinstance(changes[name], (kind, dict)):
        fields = {key: changes.pop(name), **fields}  # the key field's value alone: the rest kept
    if not fields:
        return changes
    base = changes.pop(name) if name in changes else getattr(spec, name)
    base = kind(**base) if isinstance(base, dict) else base
    removed = key in fields and fields[key] is None
    if removed:
        base = fields.pop(key)
    kind.check_names(fields)
    if base is not None:
        return {**changes, name: base.replace(**fields)}
    if not removed and (key in fields or default(kind, key) is not None):
        made = kind(**{key: fields.pop(key)}) if key in fields else kind()
        return {**changes, name: made.replace(**fields)}
    given = {k: v for k, v in fields.items() if v != default(kind, k)}
    if given:
        listed = ", ".join(f"{prefix}{k}={v!r}" for k, v in given.items())
        raise ValueError(f"{listed} set(s) a field of {name}, which this spec has not: got {name}=None.")
    return {**changes, name: None}
