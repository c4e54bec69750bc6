"""The one list of providers. Adding a provider is a folder with a `SPEC` and one line here."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from typing import Any

from forewarn.protocol.errors import UsageError

from . import aws, azure, digitalocean, gcp, kubernetes, local
from .spec import ProviderSpec


class UnknownProvider(UsageError, KeyError):
    """A provider name that is not in the registry; the text suggests the nearest one."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class Registry:
    """An ordered, immutable set of provider specs, looked up by name."""

    def __init__(self, specs: Iterable[ProviderSpec[Any]]) -> None:
        self._specs: dict[str, ProviderSpec[Any]] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"provider {spec.name!r} is registered twice")
            if not spec.name.isidentifier() or spec.name != spec.name.lower():
                raise ValueError(f"provider name {spec.name!r} is not a lower-case identifier")
            self._specs[spec.name] = spec

    def __iter__(self) -> Iterator[ProviderSpec[Any]]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __getitem__(self, name: str) -> ProviderSpec[Any]:
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownProvider(self.unknown(name))
        return spec

    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def detectable(self) -> tuple[str, ...]:
        """The providers `--provider auto` probes."""
        return tuple(spec.name for spec in self if spec.detect)

    def with_simulator(self) -> tuple[ProviderSpec[Any], ...]:
        return tuple(spec for spec in self if spec.simulate is not None)

    def with_drill(self) -> tuple[ProviderSpec[Any], ...]:
        return tuple(spec for spec in self if spec.drill is not None)

    def unknown(self, name: str, known: Iterable[str] | None = None) -> str:
        """The message for an unknown provider name, with the nearest known one."""
        choices = list(known) if known is not None else list(self._specs)
        text = f"unknown provider {name!r}"
        near = nearest_provider(name, choices)
        if near:
            text += f" (did you mean {near!r}?)"
        return f"{text}; known: {', '.join(choices)}"

    def plus(self, *specs: ProviderSpec[Any]) -> Registry:
        """A registry with these specs added (for tests and embedders)."""
        return Registry([*self, *specs])


# What people call a provider, where no spelling of it is close to the name it has here:
# `providers = ["k8s"]`, `--provider do` and a `[k8s]` table were refused with no suggestion.
ALIASES = {
    "k8s": "kubernetes",
    "kube": "kubernetes",
    "eks": "kubernetes",
    "gke": "kubernetes",
    "aks": "kubernetes",
    "do": "digitalocean",
    "ec2": "aws",
    "gce": "gcp",
}


def nearest_provider(name: str, choices: Iterable[str]) -> str | None:
    """The provider among `choices` that `name` most likely means: by a common name for it
    (`ALIASES`), else the closest spelling, else None."""
    known = list(choices)
    meant = ALIASES.get(name.lower())
    if meant in known:
        return meant
    near = difflib.get_close_matches(name.lower(), known, n=1)
    return near[0] if near else None


REGISTRY = Registry(
    [
        local.SPEC,
        aws.SPEC,
        gcp.SPEC,
        azure.SPEC,
        digitalocean.SPEC,
        kubernetes.SPEC,
    ]
)

__all__ = ["ALIASES", "REGISTRY", "Registry", "UnknownProvider", "nearest_provider"]
