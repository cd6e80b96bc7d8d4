"""Trajectory generators: ``template`` (offline), ``openai`` (HTTP endpoint), ``vllm`` (in-process).

Use :func:`gta_verl.synth.generators.registry.make_generator` to build one by name.
"""

from gta_verl.synth.generators.base import GenerationOutcome, Generator

__all__ = ["GenerationOutcome", "Generator"]
