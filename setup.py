"""fairseq-vision-attn: a fairseq plugin for where and how much an attention model looks.

Install with ``bash recipes/install.sh`` (see README): fairseq-fixed compiles C++ extensions
against torch, so it must be built against the pinned torch (recipes/constraints.txt).
"""

from setuptools import find_packages, setup

setup(
    name="fairseq-vision-attn",
    version="0.1.0",
    description="Flexible, fixed-size memory, monotonic/MILk and self-adaptive-temperature "
    "attention for fairseq LSTM models",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    packages=find_packages(include=["fairseq_vision_attn", "fairseq_vision_attn.*"]),
    install_requires=[
        "torch==2.13.0",
        "fairseq-fixed==0.12.3.1",
        "sacrebleu>=2.0",
        "subword-nmt>=0.3.8",
        "sacremoses",
        "matplotlib>=3.5",
        "numpy",
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-xdist>=3.2", "filelock>=3", "hypothesis>=6", "ruff>=0.4", "nltk>=3.9"],
        "ribes": ["nltk>=3.9"],
        "simuleval": ["simuleval==1.1.4"],
    },
    entry_points={
        "console_scripts": [
            "vision-attn-toydata = fairseq_vision_attn.toydata:main",
        ],
    },
)
