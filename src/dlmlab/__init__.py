"""dlmlab: masked-diffusion LMs beside AR, SSM and RNN models, with mechanistic analysis."""

__version__ = "0.1.0"
