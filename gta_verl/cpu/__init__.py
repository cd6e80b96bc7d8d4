"""CPU backend for stock verl 0.9.1 ``main_ppo``: debug any recipe on a laptop before renting GPUs.

* :mod:`gta_verl.cpu.platform` — verl device platform ``cpu`` (load it with
  ``VERL_USE_EXTERNAL_MODULES=gta_verl.cpu.platform`` and ``VERL_PLATFORM=cpu``; never import it
  before ``verl``, so this package ``__init__`` does not import it);
* :mod:`gta_verl.cpu.rollout` — rollout backend ``hf_cpu`` (``actor_rollout_ref.rollout.name=hf_cpu``),
  a Ray actor on HF ``generate()`` (:mod:`gta_verl.cpu.server`, :mod:`gta_verl.llm.hf_generate`);
  its sibling ``hf`` runs the same server on the training worker's GPU when the node has one
  (:mod:`gta_verl.cpu.devices` picks device, dtype and Ray options; ``docs/gpu.md``);
* :mod:`gta_verl.cpu.tiny_model` — the tiny random Qwen2 + real Qwen2.5 tokenizer model dir;
* :mod:`gta_verl.cpu.overrides` — the Hydra overrides and environment of a CPU run;
* ``recipes/cpu/run.sh`` — every recipe through ``python -m verl.trainer.main_ppo`` on CPU.
"""
