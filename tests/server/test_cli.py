"""The ``refagent`` command line (refagent.cli): options, logging set-up, and the real entry point."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import refagent
from refagent import cli
from refagent.llm.demo import DemoModel
from refagent.server import boot
from refagent.settings import Settings
from tests.support.helpers_process import agent_command, agent_env


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, restored after the test (setup_logging replaces its handlers)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REFAGENT_LOG_LEVEL", raising=False)
    args = cli.build_parser().parse_args([])
    assert args.log_level == "warning"  # quiet by default: some editors read stderr only after a failure
    assert args.log_file is None


@pytest.mark.parametrize("level", [None, "DEBUG", "chatty"])
def test_no_arguments_parse_to_the_parsers_defaults_without_it(
    monkeypatch: pytest.MonkeyPatch, level: str | None
) -> None:
    # What editors run is parsed without building the parser (its formatter costs the first answer time).
    if level is None:
        monkeypatch.delenv("REFAGENT_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("REFAGENT_LOG_LEVEL", level)
    assert vars(cli.parse_args([])) == vars(cli.build_parser().parse_args([]))
    assert cli.parse_args(["--demo"]) == cli.build_parser().parse_args(["--demo"])


def test_log_level_from_the_environment_and_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFAGENT_LOG_LEVEL", "DEBUG")
    assert cli.build_parser().parse_args([]).log_level == "debug"
    assert cli.build_parser().parse_args(["--log-level", "error"]).log_level == "error"


def test_unknown_log_level_option_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.build_parser().parse_args(["--log-level", "chatty"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_unknown_log_level_in_the_environment_is_refused_before_serving(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REFAGENT_LOG_LEVEL", "chatty")
    with pytest.raises(SystemExit) as info:
        cli.main([])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert "REFAGENT_LOG_LEVEL='chatty'" in captured.err
    assert captured.out == ""


def test_version_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"refagent {refagent.__version__}"


def test_setup_logging_to_a_file(tmp_path: Path, root_logger: logging.Logger) -> None:
    log_file = tmp_path / "agent.log"
    log_file.write_text("earlier line\n", encoding="utf-8")
    cli.setup_logging("info", str(log_file))
    logging.getLogger("refagent.test").info("hello %s", "file")
    logging.getLogger("refagent.test").debug("not at info level")
    for handler in root_logger.handlers:
        handler.flush()
    text = log_file.read_text(encoding="utf-8")
    assert text.startswith("earlier line\n")  # appended, not truncated
    assert "INFO refagent.test: hello file" in text
    assert "not at info level" not in text


def test_setup_logging_to_stderr(root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]) -> None:
    cli.setup_logging("warning", None)
    assert root_logger.level == logging.WARNING
    assert len(root_logger.handlers) == 1
    logging.getLogger("refagent.test").warning("careful")
    logging.getLogger("refagent.test").info("quiet")
    captured = capsys.readouterr()
    assert "WARNING refagent.test: careful" in captured.err
    assert "quiet" not in captured.err
    assert captured.out == ""


# -- the installed entry point, as a real process ---------------------------------------------------


def _run(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agent_command(*args),
        capture_output=True,
        text=True,
        timeout=30,
        env=agent_env(tmp_path, **env),
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_version(tmp_path: Path) -> None:
    done = _run("--version", tmp_path=tmp_path)
    assert done.returncode == 0
    assert done.stdout.strip() == f"refagent {refagent.__version__}"


def test_help(tmp_path: Path) -> None:
    done = _run("--help", tmp_path=tmp_path)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: refagent")
    for option in ("--version", "--log-level", "--log-file"):
        assert option in done.stdout
    commands = done.stdout.split("commands (each has its own --help):\n", 1)[1]
    listed = [line.split()[0] for line in commands.splitlines() if line.startswith("  ")]
    assert listed == ["chat", "run", "sessions", "demo", "login", "logout"]


def test_bad_log_level_from_the_environment(tmp_path: Path) -> None:
    done = _run(tmp_path=tmp_path, REFAGENT_LOG_LEVEL="chatty")
    assert done.returncode == 2
    assert "REFAGENT_LOG_LEVEL" in done.stderr
    assert done.stdout == ""


def test_stdin_at_eof_from_the_start(tmp_path: Path) -> None:
    """An agent started with nothing to read exits at once, cleanly, having written nothing."""
    done = _run(tmp_path=tmp_path)
    assert done.returncode == 0
    assert done.stdout == ""
    assert "Traceback" not in done.stderr


def test_typed_in_a_terminal_it_says_what_it_is_then_serves(tmp_path: Path) -> None:
    """stdin a terminal (a person, not an editor, which uses pipes): one line on stderr, then ACP as usual;
    the line never reaches stdout, which belongs to the protocol."""
    import os
    import pty

    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            agent_command(), stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=agent_env(tmp_path)
        )
        os.write(controller, b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n')
        assert process.stdout is not None
        answer = process.stdout.readline()
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    finally:
        os.close(controller)
        os.close(terminal)
    assert b'"id":1' in answer
    assert b'"protocolVersion":1' in answer
    assert stderr.decode().splitlines()[0] == boot.TERMINAL_HINT.strip()


def test_with_pipes_it_says_nothing(tmp_path: Path) -> None:
    done = _run(tmp_path=tmp_path)
    assert done.stderr == ""


# -- a fork's customisation (cli.main(customise=...)) --------------------------------------------


def marked(settings: Settings) -> Settings:
    """A fork's customisation: one more private file, easy to see."""
    return dataclasses.replace(settings, private_files=(*settings.private_files, "/fork"))


@pytest.mark.parametrize("broken", [False, True], ids=["config", "broken-config"])
def test_customise_is_applied_to_every_settings_the_agent_makes(tmp_path: Path, broken: bool) -> None:
    path = tmp_path / "config.toml"
    path.write_text("max_requests = 0\n" if broken else "max_requests = 7\n")
    args = cli.build_parser().parse_args(["--config", str(path)])
    settings = cli.load_settings(args, customise=marked)
    assert settings.private_files == (str(path), "/fork")
    assert (settings.broken is not None) is broken
    path.write_text("max_requests = 9\n")  # fixed, or changed: authenticate reads it again
    assert settings.reload is not None
    again = settings.reload()
    assert (again.private_files, again.max_requests, again.broken) == ((str(path), "/fork"), 9, None)
    assert again.reload is not None
    assert again.reload().private_files == (str(path), "/fork")


def test_customise_is_applied_to_the_demo_settings() -> None:
    settings = cli.demo_settings(customise=marked)
    assert settings.private_files == ("/fork",)
    assert settings.active_profile().client == "demo"
    assert isinstance(settings.make_model(settings.active_profile()), DemoModel)
    assert cli.demo_settings().private_files == ()
