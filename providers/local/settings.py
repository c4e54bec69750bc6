"""Settings of the `[local]` section (environment `FOREWARN_LOCAL_<KEY>`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ..settings import ProviderSettings


class Settings(ProviderSettings):
    flag_file: Path | None = Field(
        default=None,
        description="File whose appearance raises a drain; default `checkpoint-now` in the "
        "runtime directory.",
    )
    flag_interval: float = Field(
        default=0.25, gt=0, le=60, description="Seconds between looks at the flag file."
    )


__all__ = ["Settings"]
