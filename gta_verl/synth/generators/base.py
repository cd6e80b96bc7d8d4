"""The generator interface: graph paths in, trajectories (or failure reasons) out.

Every generator — offline template, OpenAI-compatible endpoint, in-process
vLLM — returns one :class:`GenerationOutcome` per input path, in order, so the
pipeline's yield funnel (sampled → generated → parsed) is the same for all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from gta_verl.data.types import Trajectory
from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.synth.paths import GraphPath

#: ``generate``: no output (LLM call failed, template found no phrasing);
#: ``parse``: output came back but is not a usable trajectory; ``ok``: trajectory.
OutcomeStage = Literal["generate", "parse", "ok"]


@dataclass(frozen=True)
class GenerationOutcome:
    """Result of one path: a trajectory, or the stage and reason it failed."""

    path: GraphPath
    trajectory: Trajectory | None = None
    stage: OutcomeStage = "ok"
    reason: str | None = None
    """Failure reason code (e.g. ``"parse:truncated"``), ``None`` on success."""
    raw: str = ""
    """Raw generator output (LLM reply), kept for debugging rejected examples."""

    def __post_init__(self) -> None:
        if (self.trajectory is None) == (self.stage == "ok"):
            raise ValueError("GenerationOutcome: stage 'ok' iff a trajectory is present")
        if self.stage != "ok" and not self.reason:
            raise ValueError("GenerationOutcome: a failed outcome needs a reason")

    @property
    def generated(self) -> bool:
        """The generator produced output (possibly unparseable)."""
        return self.stage != "generate"

    @classmethod
    def failure(cls, path: GraphPath, stage: OutcomeStage, reason: str, raw: str = "") -> GenerationOutcome:
        return cls(path=path, trajectory=None, stage=stage, reason=reason, raw=raw)


@runtime_checkable
class Generator(Protocol):
    """Turns graph paths into synthetic multi-hop trajectories (x, y*, S(x), τ*)."""

    name: str

    def generate(self, paths: Sequence[GraphPath], kb: KnowledgeBase) -> list[GenerationOutcome]:
        """Return one outcome per path, in order; never raises for a single bad path."""
        ...
