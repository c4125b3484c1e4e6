"""solforge: agents propose GPU kernels; NVRTC compiles them; a GPU evaluator checks, times and scores them."""

__version__ = "0.1.0"
