"""Framework callbacks wiring CheckpointGuard into each framework's own checkpointing.

Import the one you use; each needs its framework installed (extras `lightning`,
`transformers`; without it, the import raises `ExtraMissingError` with the pip command):

    from forewarn.clients.frameworks.lightning import ForewarnCallback
    from forewarn.clients.frameworks.transformers import ForewarnTrainerCallback
"""

__all__: list[str] = []
