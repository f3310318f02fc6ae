"""What refagent says when no model is set up: honest about it, and pointing to the way out."""

from __future__ import annotations

from refagent.llm.protocol import ModelRequest, TextDelta
from refagent.llm.scripted import offline_reply


def test_the_offline_answer_names_refagent_login_first() -> None:
    steps = offline_reply(ModelRequest(messages=[{"role": "user", "content": "fix the tests"}]))
    said = "".join(step.text for step in steps if isinstance(step, TextDelta))
    assert "no model endpoint is configured" in said
    assert "You said: 'fix the tests'." in said
    assert said.index("`refagent login`") < said.index("OPENAI_API_KEY")
