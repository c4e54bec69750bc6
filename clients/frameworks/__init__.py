"""Framework callbacks (Lightning, transformers) wiring CheckpointGuard in."""
