"""Checks of a base URL and of a name given on the command line, in a module that loads
nothing else: the settings models validate `url` with `check_url`, and a drill's arguments
(`--url`, `--project`, `--vm`) with these too, so `forewarn drill gcp --help` loads no
settings model (pydantic) to build its parser."""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit


def check_url(value: str, schemes: tuple[str, ...], bare_host: bool) -> str:
    """`value` as a base URL: a scheme among `schemes` (or, when `bare_host`, none: then it
    is `HOST[:PORT]` over http), a host, a valid port, no query or fragment."""
    text = value.strip()
    if "://" not in text:
        if not bare_host:
            raise ValueError(f"expected a URL such as {schemes[0]}://127.0.0.1:8080, got {value!r}")
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in schemes:
        allowed = " or ".join(f"{scheme}://" for scheme in schemes)
        raise ValueError(f"must start with {allowed}, got {value!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError(f"bad port in {value!r}") from None
    if not parts.hostname:
        raise ValueError(f"no host in {value!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"a base URL has no query or fragment, got {value!r}")
    return value.strip()


def name_arg(text: str) -> str:
    """An argparse `type=` for a name a drill puts in a request: not empty (`--project
    "$PROJECT"` with the variable unset made a request to projects//...), and without the
    space around it (`--vm "$VM"` read from a file kept its newline, a name no VM has)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty")
    return text.strip()


__all__ = ["check_url", "name_arg"]
