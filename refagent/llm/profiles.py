"""Model profiles: which endpoint, which model, and what it can do.

A profile is one entry of the editor's model picker (the ``model`` config option). The built-in
``scripted`` profile needs no endpoint: it is what refagent runs on when nothing is configured.
"""

from __future__ import annotations

from dataclasses import dataclass

SCRIPTED = "scripted"


@dataclass(frozen=True, slots=True)
class ModelProfile:
    id: str
    name: str
    model: str = ""
    """The model name sent to the endpoint."""
    base_url: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    """The environment variable the key was (or would be) read from, for error messages."""
    context_window: int = 128_000
    images: bool = False
    input_price: float | None = None
    """Price per input token, in ``currency``."""
    output_price: float | None = None
    currency: str = "USD"
    description: str = ""

    @property
    def scripted(self) -> bool:
        return self.id == SCRIPTED


def scripted_profile() -> ModelProfile:
    return ModelProfile(
        id=SCRIPTED,
        name="Built-in scripted model (offline)",
        model=SCRIPTED,
        description="No model endpoint configured: a scripted model answers.",
    )
