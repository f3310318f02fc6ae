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


def test_the_offline_answer_quotes_the_user_not_the_agents_reminders() -> None:
    reminder = "<system-reminder>These files changed outside your tool calls: app.py</system-reminder>"
    messages = [{"role": "user", "content": "fix the tests"}, {"role": "user", "content": reminder}]
    steps = offline_reply(ModelRequest(messages=messages))
    said = "".join(step.text for step in steps if isinstance(step, TextDelta))
    assert "You said: 'fix the tests'." in said
    assert "system-reminder" not in said
    assert "changed outside" not in said
