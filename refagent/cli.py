"""The ``refagent`` command: run the ACP agent on stdin/stdout.

Logs go to stderr (or ``--log-file``), never stdout: stdout belongs to the protocol, and
:func:`refagent.server.stdio.guard_stdio` makes sure nothing else can reach it. The default level is
``warning`` because some editors read the agent's stderr only after it fails, and a chatty agent can fill
the pipe and block.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, TypeAlias, cast

from refagent import __version__, logs
from refagent.errors import ConfigError

# What serving needs is imported where it is used, after main() has turned the garbage collector off
# (refagent.server.boot): the configuration's modules (dataclasses among them) are most of the way to the
# editor's first answer, and collecting while they load costs 1 to 3 ms of it (machines differ).
if TYPE_CHECKING:
    import argparse

    from refagent.settings import Settings

LOG_LEVELS = ("debug", "info", "warning", "error")
Customise: TypeAlias = "Callable[[Settings], Settings]"
"""A fork's change to the agent's settings (its tools, its model factory...): given the settings refagent
made, the settings to run with (:func:`main`)."""


USAGE = (
    "refagent [options]       serve ACP on stdin/stdout (what editors run)\n"
    "       refagent COMMAND ...     a command below (refagent COMMAND --help)"
)
DESCRIPTION = (
    "A coding agent that speaks the Agent Client Protocol (ACP v1) over stdin/stdout.\n"
    "Editors start it as a subprocess; run it without arguments to serve ACP."
)
COMMANDS = """commands (each has its own --help):
  chat                  a conversation with refagent in this terminal, turn after turn
  run "TASK"            one task, then exit (for scripts: exit codes, --yes, a prompt on stdin)
  sessions              the saved sessions: list (the default), show ID, delete ID
  demo                  watch refagent fix a bug in a fresh copy of a demo project (no key needed)
  login                 set up a model (endpoint, model, key, context window) in the config file
  logout                forget the keys stored in the config file"""


def build_parser() -> argparse.ArgumentParser:
    # here: argparse only with options (1.8 ms); config after gc.disable() (1.1 ms), never for `sessions` (4.8 ms)
    import argparse

    from refagent import config

    parser = argparse.ArgumentParser(
        prog="refagent",
        usage=USAGE,
        description=DESCRIPTION,
        epilog=COMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"refagent {__version__}")
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=_default_log_level(),
        help="how much to log (default: warning, or $REFAGENT_LOG_LEVEL)",
    )
    parser.add_argument("--log-file", help="append logs to this file instead of stderr")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="answer from the built-in demo model, a scripted session that fixes the bug in "
        "the demo project of `refagent demo` (no key, no network; any model configuration is ignored)",
    )
    config.add_arguments(parser)
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The agent's command line, parsed by :func:`build_parser`. Without arguments (what most editors run),
    its defaults, without building the parser or importing argparse: its help formatter and translations
    cost some 5 ms of the editor's first answer."""
    if argv:
        return build_parser().parse_args(argv)
    from refagent.config.flags import Flags  # here: the configuration loads after gc.disable() (1.1 ms)

    defaults = SimpleNamespace(log_level=_default_log_level(), log_file=None, demo=False)
    for name in Flags._fields:  # config.add_arguments's, none of which has a default
        setattr(defaults, name, None)
    # A namespace with the parser's attributes, all that is read of it (argparse itself is not imported).
    return cast("argparse.Namespace", defaults)


def _default_log_level() -> str:
    return os.environ.get("REFAGENT_LOG_LEVEL", "warning").lower()


def setup_logging(level: str, log_file: str | None) -> None:
    """Send the logs at ``level`` and above to ``log_file`` (appended), or to stderr, from now on."""
    logs.configure(level, log_file)
    logs.ready()


def main(argv: list[str] | None = None, *, customise: Customise | None = None) -> int:
    """The ``refagent`` command: serve ACP on stdio, or one of its subcommands (``run``, ``chat``, ``demo``,
    ``sessions``, ``login``, ``logout``); the exit status. ``argv``: the arguments (default: ``sys.argv[1:]``).

    ``customise`` is how a fork changes the agent without copying this function: it is applied to every
    :class:`Settings` the agent runs with, the first (from the configuration, a broken one, or ``--demo``'s)
    and each one ``authenticate`` and ``logout`` read again (:attr:`Settings.reload`), so that a fork's
    tools or model survive a sign-in. It should return a changed copy (``dataclasses.replace``) and keep
    what it does not change. The subcommands are terminal clients that start their own agent process, and
    are not customised (``refagent run --agent "python fork.py"`` runs a fork).
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:  # the terminal client: a separate program that starts this one
        from refagent.client.run import main as run_main  # here: only this command's client (32 ms)

        return run_main(argv[1:])
    if argv[:1] == ["chat"]:  # the interactive terminal client: a conversation with a refagent it starts
        from refagent.client.chat import main as chat_main  # here: only this command's client (147 ms)

        return chat_main(argv[1:])
    if argv[:1] == ["demo"]:  # `make demo`: a real client and agent fix the bug of the packaged demo project
        from refagent.client.demo import main as demo_main  # here: only this command's client (39 ms)

        return demo_main(argv[1:], prog="refagent demo")
    if argv[:1] == ["sessions"]:  # list, show and delete the saved sessions: a client of this program too
        from refagent.client.sessions import main as sessions_main  # here: only this command's client (37 ms)

        return sessions_main(argv[1:])
    if argv[:1] == ["login"]:  # interactive set-up in a terminal: writes the config file
        from refagent.client.login import main as login_main  # here: only this command's client (35 ms)

        return login_main(argv[1:])
    if argv[-1:] == ["login"]:  # an editor's terminal sign-in: the agent's own command line, then "login"
        from refagent.client.login import main as login_main  # here: only this command's client (35 ms)

        named = build_parser().parse_known_args(argv[:-1])[0].config
        return login_main(["--config", named] if named else [])
    if argv[:1] == ["logout"]:  # forgets the keys stored in the config file
        from refagent.client.login import logout_main  # here: only this command's client (35 ms)

        return logout_main(argv[1:])
    from refagent.sandbox.confine import probe  # here: serving only, not the commands above (1 ms)

    options = parse_args(argv) if argv else None  # --help and --version end here, before anything starts
    # Serving (see serve_stdio): the sandbox probe runs on another core while the configuration loads, and
    # the garbage collector is off before the configuration's modules load (with no options, as editors
    # mostly start it, before the flags' module too).
    probe.start()
    gc.disable()
    args = options or parse_args(argv)
    if args.log_level not in LOG_LEVELS:  # only the default can be wrong: argparse checked the option
        build_parser().error(
            f"REFAGENT_LOG_LEVEL={args.log_level!r}: --log-level must be one of {', '.join(LOG_LEVELS)}"
        )
    logs.configure(args.log_level, args.log_file)  # applied when first needed (refagent.logs)
    from refagent.server.boot import serve_stdio  # here: serving only, after gc.disable() (8.5 ms)

    if args.demo:
        return serve_stdio(demo_settings(private_files(args, None), customise=customise))
    return serve_stdio(load_settings(args, customise=customise))


def load_settings(args: argparse.Namespace, *, customise: Customise | None = None) -> Settings:
    """The agent's settings from the config file, the environment and ``args``, each made (the first, and
    those :attr:`Settings.reload` reads again) passed through ``customise`` if given (see :func:`main`).

    A broken configuration (a file that is not valid, an unknown profile, ``--max-requests 0``...) does not
    stop the agent: an editor would only show that it crashed. It runs on the scripted model instead
    (:func:`refagent.llm.scripted.broken_config_model`), whose every turn fails with what is wrong: a
    failure of kind ``config`` (:mod:`refagent.session.turn`), which ``refagent run`` exits 1 on. A client
    that shows notices hears it when a session opens, too. Authenticating reads the configuration again
    once it is fixed. It is logged at info only: the user is told in the session, and ``refagent run``
    shares the agent's stderr, where a warning would say it a second time.
    """
    # here: loaded after main()'s gc.disable(): with the collector on they cost 1.1 ms more of the first answer
    import dataclasses

    from refagent import config
    from refagent.settings import Settings

    path = config.config_file(args, os.environ)
    private = private_files(args, path)
    finish = customise or _as_they_are

    def reload() -> Settings:
        settings = Settings.from_config(config.load(args, os.environ), reload)
        return finish(dataclasses.replace(settings, config_file=path, private_files=private))

    try:
        return reload()
    except ConfigError as exc:
        logs.logger("refagent").info("the configuration is broken: %s", exc)
        from refagent.llm.scripted import broken_config_model  # here: a broken configuration only (4.5 ms)

        problem = str(exc)
        broken = Settings(
            make_model=lambda profile: broken_config_model(problem),
            reload=reload,
            config_file=path,
            broken=problem,
            private_files=private,
        )
        return finish(broken)


def _as_they_are(settings: Settings) -> Settings:
    return settings


def private_files(args: argparse.Namespace, config_file: str | None) -> tuple[str, ...]:
    """The files of the agent's own that the command line names (its config file and its log file):
    commands must not read them (:attr:`refagent.settings.Settings.private_files`)."""
    named = [config_file, getattr(args, "log_file", None)]
    return tuple(os.path.abspath(path) for path in named if path)


def demo_settings(private: tuple[str, ...] = (), *, customise: Customise | None = None) -> Settings:
    """``--demo``: the built-in demo model (:mod:`refagent.llm.demo`, the client kind ``demo``) instead of the
    configuration, passed through ``customise`` if given (see :func:`main`)."""
    # here: --demo only (llm.demo: 9.6 ms); the settings load after main()'s gc.disable() (1.1 ms)
    from refagent.llm.demo import demo_profile
    from refagent.settings import Settings

    settings = Settings(profiles=[demo_profile()], private_files=private)
    return customise(settings) if customise is not None else settings
