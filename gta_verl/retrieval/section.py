"""``gta.retriever``: the retrieval environment of the rollouts, as the recipe YAML writes it.

One flat YAML node holds three things, each validated by its own class: where R(q) lives and how
long a caller waits (``kb_dir``, ``actor_name``, ``timeout_s``), how it is served
(:class:`~gta_verl.retrieval.serving.config.ServingConfig`'s keys) and how it retrieves
(:class:`~gta_verl.retrieval.config.RetrieverConfig`'s keys). :class:`RetrieverSection` splits
the node into them; the agent loops, the trainer and the evaluation read it.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

from gta_verl.retrieval.config import MODES, RetrieverConfig
from gta_verl.retrieval.serving.config import DEFAULT_ACTOR_NAME, ServingConfig
from gta_verl.strict_config import StrictConfig

#: The section's own default where it differs from ServingConfig's: a training job's retriever
#: serves every rollout worker of the job, so it reserves 4 CPUs where a bare service reserves 1.
SECTION_SERVING_DEFAULTS: dict[str, Any] = {"num_cpus": 4.0}


def _default_serving() -> ServingConfig:
    return ServingConfig(**SECTION_SERVING_DEFAULTS)


@dataclass(frozen=True)
class RetrieverSection(StrictConfig):
    """``gta.retriever``: the retrieval environment of the rollouts.

    Attributes:
        kb_dir: KB directory built by ``gta-verl kb build`` (required to train; None only for
            config checks).
        actor_name: Ray actor name; created once per job, found by name from every agent-loop worker.
        timeout_s: Per-call timeout; a timeout becomes an observation the policy sees, not a crash.
        serving: Replicas, autoscaling, placement, CPUs (0 GPUs: verl's placement groups hold
            them) and batching of the service; written flat in YAML.
        retrieval: The retrieval knobs (mode, k_graph, k_dense, alpha, top_n_triples, …);
            written flat in YAML.
    """

    WHERE = "gta.retriever"
    OWN_KEYS = ("kb_dir", "actor_name", "timeout_s")

    kb_dir: str | None = None
    actor_name: str = DEFAULT_ACTOR_NAME
    timeout_s: float = 30.0
    serving: ServingConfig = field(default_factory=_default_serving)
    retrieval: RetrieverConfig = field(default_factory=RetrieverConfig)

    def __post_init__(self) -> None:
        if not self.actor_name:
            raise ValueError("gta.retriever.actor_name must be a non-empty Ray actor name")
        if not (math.isfinite(float(self.timeout_s)) and float(self.timeout_s) > 0):
            raise ValueError(f"gta.retriever.timeout_s={self.timeout_s} must be > 0 seconds")

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        """The section's own keys, ServingConfig's and RetrieverConfig's (all flat in YAML)."""
        return frozenset(cls.OWN_KEYS) | ServingConfig.known_keys() | RetrieverConfig.known_keys()

    @classmethod
    def _from_checked(cls, values: dict[str, Any], where: str) -> RetrieverSection:
        mode = values.get("mode")
        if mode is not None and mode not in MODES:
            raise ValueError(f"{where}.mode={mode!r}; use one of {MODES} (dense = w/o graph)")
        serving_keys = ServingConfig.known_keys()
        serving = {k: values.pop(k) for k in list(values) if k in serving_keys}
        own = {k: values.pop(k) for k in cls.OWN_KEYS if k in values}
        return cls(
            serving=ServingConfig(**{**SECTION_SERVING_DEFAULTS, **serving}),
            retrieval=RetrieverConfig(**values),
            **own,
        )

    def __getattr__(self, name: str) -> Any:
        """Deprecated flat access to the serving keys (``section.num_cpus``): use ``section.serving``."""
        if name in ServingConfig.known_keys():
            warnings.warn(
                f"RetrieverSection.{name} is deprecated; use RetrieverSection.serving.{name}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(self.serving, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def knobs(self) -> dict[str, Any]:
        """The retrieval knobs as a plain dict (``RetrieverConfig`` fields)."""
        return self.retrieval.to_dict()

    def retriever_config(self) -> RetrieverConfig:
        """The :class:`~gta_verl.retrieval.config.RetrieverConfig` of the knobs."""
        return self.retrieval

    def serving_config(self) -> ServingConfig:
        """The :class:`~gta_verl.retrieval.serving.config.ServingConfig` of the service keys."""
        return self.serving

    def spec(self, kb_dir: str | None = None) -> Any:
        """The :class:`~gta_verl.retrieval.serving.service.RetrieverSpec` of the job's retriever service.

        The one creation path of the trainer and the agent loop: the section's typed retriever
        and serving configs as they are, ``kb_dir`` (default the section's) made absolute by the spec.

        Raises:
            ValueError: Neither ``kb_dir`` nor the section's is set.
        """
        from gta_verl.retrieval.serving.service import RetrieverSpec

        kb = kb_dir or self.kb_dir
        if not kb:
            raise ValueError("gta.retriever.kb_dir is not set: set gta.retriever.kb_dir=/path/to/kb")
        return RetrieverSpec(
            kb_dir=str(kb), config=self.retrieval, serving=self.serving, name=self.actor_name
        )

    def to_dict(self) -> dict[str, Any]:
        """The flat node as YAML writes it; :meth:`from_mapping` takes it back."""
        own = {k: getattr(self, k) for k in self.OWN_KEYS}
        return {**own, **dataclasses.asdict(self.serving), **self.retrieval.to_dict()}
