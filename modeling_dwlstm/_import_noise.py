"""Imports transformers' model code with two kinds of log lines dropped, before the members import it.

transformers' model code imports torchao, when it is installed, for its quantizer: torchao then logs
"Failed to load ....so" for each compiled kernel built for another torch (its CUDA and mxfp8 kernels
on a CPU build), and torch logs a deprecation line for each torchao enum registered with pytree.
None of it concerns these models (no torchao kernel runs in them), and every command would print it
before its own output. Only those records are dropped, and only during this import; torchao's and
torch's other messages pass.
"""

import logging
from contextlib import contextmanager

NOISY_LOGGERS = ("torchao", "torch.utils._pytree")


class OptionalBackendNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        failed_kernel = message.startswith("Failed to load ") and ".so" in message
        return not (failed_kernel or "is an Enum subclass and is now natively supported" in message)


@contextmanager
def optional_backend_noise_dropped():
    noise, loggers = OptionalBackendNoise(), [logging.getLogger(name) for name in NOISY_LOGGERS]
    for logger in loggers:
        logger.addFilter(noise)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(noise)


with optional_backend_noise_dropped():
    from transformers import modeling_utils  # noqa: F401  (the import that loads torchao)
