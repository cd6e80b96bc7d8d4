"""The one way gta-verl builds a config object from a mapping: strict, and OmegaConf-aware.

Every settings dataclass of the package (``gta:`` node sections, retriever and serving configs,
reward and PathRouter values) derives from :class:`StrictConfig` and is built with
:meth:`StrictConfig.from_mapping`, which accepts a plain mapping or an OmegaConf node and
rejects unknown keys with the valid ones listed: verl validates its own nodes the same way,
and a typo in an override must fail at start-up instead of silently training with a default.
:func:`to_plain` is the package's one OmegaConf → plain-data conversion, :func:`node_at` (and
:func:`value_at`, the same with a dotted path and a default) its one way to read a node of a config.

Stdlib only (OmegaConf is imported when a node is one), so that every config module can
build on it without importing anything heavy.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T", bound="StrictConfig")


def to_plain(node: Any) -> Any:
    """An OmegaConf ``DictConfig`` / ``ListConfig`` as plain dicts and lists (interpolations resolved).

    Anything else (``None``, a dict, a number) is returned unchanged.
    """
    if type(node).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(node, resolve=True)
    return node


def node_at(cfg: Any, *keys: str) -> Any:
    """``cfg[keys[0]][keys[1]]…`` of a trainer config (OmegaConf node, mapping or None); None if absent."""
    for key in keys:
        if cfg is None:
            return None
        cfg = cfg.get(key) if hasattr(cfg, "get") else getattr(cfg, key, None)
    return cfg


def value_at(cfg: Any, dotted: str, default: Any = None) -> Any:
    """The value at the dotted path ``dotted`` of a config, or ``default`` where it is absent or None.

    :func:`node_at` with the keys written ``"a.b.c"`` and a default; a falsy value that is not
    None (``False``, ``0``, ``""``) is returned as it is.

    Args:
        cfg: An OmegaConf node, a mapping, an object with attributes (a dataclass), or None.
        dotted: The keys, joined by dots (``"trainer.v1.trainer_mode"``).
        default: What an absent or None value reads as.

    Examples:
        >>> value_at({"trainer": {"use_v1": False}}, "trainer.use_v1", True)
        False
        >>> value_at({"trainer": {"use_v1": None}}, "trainer.use_v1", True)
        True
        >>> value_at({"trainer": "sync"}, "trainer.v1.trainer_mode", "gta_sync")
        'gta_sync'
    """
    value = node_at(cfg, *dotted.split("."))
    return default if value is None else value


def reject_unknown(values: Mapping[str, Any], known: set[str] | frozenset[str], where: str) -> None:
    """Raise ``ValueError`` naming the keys of ``values`` outside ``known``, and listing the valid ones.

    Args:
        values: The mapping given.
        known: The keys the config accepts.
        where: The config node, as the user writes it (``gta.agent``, ``RetrieverConfig``).
    """
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(
            f"unknown key(s) {unknown} under {where}; valid keys: {sorted(known)} "
            f"(unknown {where} keys fail here instead of silently keeping a default)"
        )


class StrictConfig:
    """Base of the package's frozen settings dataclasses: :meth:`from_mapping` builds them.

    Subclasses set ``WHERE`` (the node name used in messages) and may override
    :meth:`known_keys` (what the mapping may hold) and :meth:`_from_checked` (how a checked
    mapping becomes an instance: nested sections, flat keys spread over parts).
    """

    WHERE = "config"

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        """The keys :meth:`from_mapping` accepts: the dataclass fields."""
        return frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def from_mapping(cls: type[T], values: Any = None, where: str | None = None) -> T:
        """Build from a mapping or an OmegaConf node; ``None`` gives the defaults.

        Args:
            values: The settings.
            where: The node name for messages (default ``WHERE``).

        Raises:
            TypeError: ``values`` is not a mapping.
            ValueError: A key is unknown (the message lists the valid ones) or a value is bad.
        """
        where = where or cls.WHERE
        values = to_plain(values)
        if values is None:
            return cls()
        if not isinstance(values, Mapping):
            raise TypeError(f"{where} must be a mapping, got {type(values).__name__}")
        reject_unknown(values, cls.known_keys(), where)
        return cls._from_checked(dict(values), where)

    @classmethod
    def from_dict(cls: type[T], values: Any = None) -> T:
        """Deprecated name of :meth:`from_mapping`."""
        warnings.warn(
            f"{cls.__name__}.from_dict is deprecated; use {cls.__name__}.from_mapping",
            DeprecationWarning,
            stacklevel=2,
        )
        return cls.from_mapping(values)

    @classmethod
    def _from_checked(cls: type[T], values: dict[str, Any], where: str) -> T:
        """An instance from a mapping whose keys :meth:`from_mapping` has checked."""
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (nested configs too); ``from_mapping`` takes it back."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]
