"""Imports transformers' model code, with two kinds of log lines dropped, before the members do.

With torchao installed, importing transformers' model code logs "Failed to load ....so" for each
torchao kernel built for another torch and a torch deprecation line for each torchao enum: noise
before every command's output that concerns no model here. Only those records are dropped, only
during this import.
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
