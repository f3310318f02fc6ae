"""What "always allow" remembers of a command: :func:`permission_scope`.

"Always allow" for commands (:func:`permission_scope`) remembers *exactly this command*
(``command-exact:<text>``), unless the command is in :data:`SCOPED_COMMANDS`, a curated table of
leading words (``git status``, ``pytest``, ``python -m pytest``, ``npm run <script>``, ``make <target>``
...) each with an :class:`ArgumentRule` that every later argument must pass: the options it lists (none
that write files, run a pager, an editor, a hook, a plugin or a helper, or read a config), and
positionals that are plain relative paths (no ``/``, ``@`` or ``-`` in front, no ``..``, nothing in
``.git``). Only then is the
key ``command:<leading words>``, labelled with what the rule lets through ("`git diff` with read-only
options, revisions and relative paths"). :mod:`refagent.tools.permissions` compares keys for equality, and
every command that gets a given key passed the same rule, so allowing ``git diff --stat`` allows
``git diff HEAD~1 src/`` and never ``git diff --output=/elsewhere`` or ``git push``. Why not the leading
words alone: options execute (``git grep -O``, ``sed 1e``, ``pytest -p``, ``go test -exec``, ``git diff
--ext-diff``) or write anywhere (``--output``, ``--basetemp``, ``-o``).

The check is on the text, before any shell sees it, so the text must mean one thing: printable ASCII
letters, digits and ``_ . / : , + @ % = ^ -`` separated by spaces, and ``~`` only inside a word (``HEAD~1``),
never where the shell expands it. Anything else gets the exact scope: quotes and backslashes (which can
hide anything), ``$``, globs, braces, ``#``, operators, redirections (``2>&1`` and ``>/dev/null`` excepted),
newlines, NUL, non-ASCII look-alikes, environment assignments in front (``PATH=``, ``LD_PRELOAD=``,
``PYTEST_ADDOPTS=``), wrappers (:data:`WRAPPERS`), destructive programs (:data:`DESTRUCTIVE`) and commands
longer than :data:`MAX_SCOPED_CHARS`. A path argument is checked as text: a symlink inside the workspace
that points out is for the sandbox to hold, not for this check. The repository's own code and
configuration (a test, a ``Makefile`` target, a ``package.json`` script, ``.git/config``) run whatever
they say; that is what the user allows when allowing ``pytest`` or ``npm run test``, and the sandbox
level is what confines it.

The table is data; it reads best next to the rule that uses it, which is why this module is long.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

MAX_SCOPED_CHARS = 1000
"""A longer command gets the exact scope: nobody reads that far before choosing "Always allow"."""
WRAPPERS = frozenset(
    {
        "sudo", "doas", "su", "env", "eval", "exec", "xargs", "sh", "bash", "zsh", "dash", "fish", "ksh",
        "nohup", "time", "nice", "ionice", "timeout", "watch", "command", "builtin", "source", ".", "strace",
        "chroot", "setsid", "stdbuf", "unbuffer", "parallel", "ssh",
    }
)  # fmt: skip
"""They run another command given as arguments: never in :data:`SCOPED_COMMANDS`, always the exact scope."""
DESTRUCTIVE = frozenset(
    {
        "rm", "rmdir", "dd", "shred", "mkfs", "chmod", "chown", "chgrp", "kill", "pkill", "killall",
        "shutdown", "reboot", "halt", "poweroff", "truncate", "find",
    }
)  # fmt: skip
""""Always allow `rm`" is too much to offer for one click: these get the exact command only (``find``
because of ``-delete`` and ``-exec``), even if a fork puts them in :data:`SCOPED_COMMANDS`."""

_PLAIN = re.compile(r"[A-Za-z0-9_./:,+@%=^~ \t-]+")
"""The characters a scoped command may have: none of them means anything to bash or sh inside a word
(``~`` aside, see :data:`_EXPANDED_TILDE`)."""
_EXPANDED_TILDE = re.compile(r"(?:^|[^A-Za-z0-9_])~")
"""``~`` at the start of a word or after ``=`` or ``:`` becomes a home directory; ``HEAD~1`` stays."""
_HARMLESS_REDIRECT = re.compile(r"[ \t]+(?:2>&1|[12&]?>[ \t]*/dev/null)(?=[ \t]|\Z)")
"""``2>&1`` and output thrown away change nothing a scope is about."""
_WORD = re.compile(r"[A-Za-z0-9_.][^=]*")
"""A plain positional or option value: not an option (``-``), not argparse's ``@file``, not ``a=b``
(``make CC=...``), not ``:``, ``%`` or ``^`` in front."""
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")
"""A make target or a package.json script."""
_PYTHON = re.compile(r"python(?:3(?:\.\d+)?)?")


def _relative_path(arg: str) -> bool:
    """A word that names something under the working directory by its text: not absolute, no ``..``, and
    nothing in ``.git`` (out of bounds for the file tools too: remote URLs there can hold tokens)."""
    parts = arg.split("/")
    return bool(_WORD.fullmatch(arg)) and ".." not in parts and ".git" not in parts


def _local_package(arg: str) -> bool:
    """``go``'s ``.``, ``./...``, ``./cmd/x``: never a module path, which ``go`` would download and run."""
    return (arg == "." or arg.startswith("./")) and _relative_path(arg)


def _plain_word(arg: str) -> bool:
    return bool(_WORD.fullmatch(arg))


def _nothing(arg: str) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class ArgumentRule:
    """What may follow an entry's leading words for the prefix scope to hold; :attr:`what` says it in the
    label. Every argument is checked wherever it stands (GNU tools take options after operands too)."""

    what: str
    """The label after the leading words: "with read-only options and relative paths"."""
    options: str = ""
    """A regular expression that each option (a word starting with ``-``) must match whole. List only
    full option names: ``git`` and ``argparse`` take unique abbreviations (``--out`` for ``--output``),
    and a word not listed gets the exact scope. List no option that takes its value as the next word
    unless it is in :attr:`valued`."""
    valued: frozenset[str] = frozenset()
    """Options whose value is the next word, which must then be a plain word (``-k name``, ``-n 5``)."""
    first: re.Pattern[str] | None = None
    """What the first positional must be when it is not a path: a ``grep`` pattern, a ``sed`` script."""
    positionals: Callable[[str], bool] = _nothing
    """What every other positional must be; none unless said (``_relative_path``, ``_plain_word`` ...)."""
    double_dash: bool = False
    """``--`` ends the options (``git diff -- src``); what follows is still checked as positionals."""

    def accepts(self, args: list[str]) -> bool:
        """Whether every one of ``args`` (the words after the leading ones) passes this rule. The words have
        passed :func:`permission_scope`'s character check: the shell passes them on unchanged."""
        value_next = options_done = first_seen = False
        for arg in args:
            if value_next:
                value_next = False
                if not _WORD.fullmatch(arg):
                    return False
            elif arg.startswith("-") and not options_done:
                if arg == "--" and self.double_dash:
                    options_done = True
                elif arg in self.valued:
                    value_next = True
                elif not self.options or not re.fullmatch(self.options, arg):
                    return False
            elif self.first is not None and not first_seen:
                first_seen = True
                if not self.first.fullmatch(arg) or not _WORD.fullmatch(arg):
                    return False
            elif not self.positionals(arg):
                return False
        return not value_next


NAME = "<name>"
"""In a :data:`SCOPED_COMMANDS` key: any :data:`_NAME` (``make test``, ``npm run lint``); kept in the key."""
PYTHON = "<python>"
"""In a :data:`SCOPED_COMMANDS` key: ``python``, ``python3``, ``python3.12`` (first, also as a path)."""

_READ = "with read-only options and relative paths"
_REVS = "with read-only options, revisions and relative paths"
_NO_ARGS = ArgumentRule("with no other arguments")
_DIFF = (
    r"--stat(=\d+(,\d+)*)?|--shortstat|--numstat|--name-only|--name-status|--summary|--raw|-p|--patch|-U\d+"
    r"|--unified=\d+|-w|--ignore-all-space|-b|--ignore-space-change|--ignore-blank-lines|--color(=(always|never"
    r"|auto))?|--no-color|--word-diff(=(color|plain|porcelain|none))?|--color-words|--patience|--histogram"
    r"|--minimal|-M\d*%?|--find-renames|--no-renames|-R|--no-ext-diff|--no-textconv|--check|--exit-code|--quiet"
    r"|--diff-filter=[ACDMRTUXBacdmrtuxb]+|--abbrev(=\d+)?|--full-index"
)
"""``git diff``'s read-only options, shared by ``log`` and ``show``. Not ``--output``, ``--ext-diff``,
``--textconv`` (they write a file or run a configured program), not ``-O`` (reads a file)."""
_LOG = (
    r"--oneline|-n\d+|-\d+|--max-count=\d+|--skip=\d+|--graph|--decorate(=(short|full|auto|no))?|--no-decorate"
    r"|--all|--branches|--follow|--reverse|--first-parent|--no-merges|--merges|--abbrev-commit|--date=[a-z-]+"
    r"|--(author|committer|since|until|after|before|grep)=[^-].*|-i|-S[^-].*|-G[^-].*"
    r"|--(format|pretty)=([A-Za-z0-9_.,:+-]|%[A-FH-Za-z%])*|--pretty"
)
"""``git log``'s: no ``--show-signature`` nor ``%G`` placeholders (they run gpg)."""
_PYTEST = ArgumentRule(
    "with reporting and test-selection options and relative test paths (no plugins, config or output files)",
    r"-[qvxsl]+|-r[a-zA-Z]+|-n\d+|-nauto|--tb=(auto|long|short|line|native|no)|--maxfail=\d+|--exitfirst"
    r"|--lf|--last-failed|--ff|--failed-first|--nf|--new-first|--sw|--stepwise|--co|--collect-only|--showlocals"
    r"|--no-header|--no-summary|--durations=\d+|--strict-markers|--runxfail|--disable-warnings|--quiet|--verbose"
    r"|--color=(yes|no|auto)",
    frozenset({"-k", "-m", "-n"}),
    positionals=_relative_path,
)
"""Not ``-p`` (loads a plugin), ``-c``/``--config-file``/``-o``/``--rootdir``/``--confcutdir`` (read other
config, which can load plugins), ``--basetemp`` (which pytest empties), ``--junitxml``/``--log-file``
(write), ``-W`` (imports a warning class), ``--pdb``; positionals not ``@file`` (arguments read from a file)."""
_MYPY = ArgumentRule(
    "with checking options and relative paths or package names (no config, cache or report files)",
    r"--strict|--pretty|--show-error-codes|--hide-error-codes|--show-column-numbers|--show-error-context"
    r"|--no-error-summary|--ignore-missing-imports|--check-untyped-defs|--disallow-untyped-defs|--warn-unused-ignores"
    r"|--warn-return-any|--no-incremental|--follow-imports=(normal|silent|skip|error)|--python-version=\d+\.\d+"
    r"|--no-color-output|--explicit-package-bases|--no-site-packages|-v|--verbose",
    frozenset({"-p", "--package", "-m", "--module"}),
    positionals=_relative_path,
)
"""Not ``--python-executable`` (runs it), ``--install-types`` (pip), ``--config-file``, ``--cache-dir``,
``--*-report``, ``--junit-xml``."""
_RUFF_CHECK = ArgumentRule(
    "with rule and output-format options and relative paths (no fixes, config or output files)",
    r"--(select|ignore|extend-select|extend-ignore)=[A-Z0-9,]+|--statistics|--show-fixes|--no-fix|--diff|-q"
    r"|--quiet|-s|--silent|-n|--no-cache|-e|--exit-zero|--preview|--no-preview|--target-version=py3\d+"
    r"|--output-format=(concise|full|json|json-lines|junit|grouped|github|gitlab|pylint|rdjson|azure|sarif)",
    frozenset({"--select", "--ignore", "--extend-select", "--extend-ignore"}),
    positionals=_relative_path,
)
_UNITTEST = ArgumentRule(
    "with reporting options and relative test names",
    r"-[vqfcb]+|--verbose|--quiet|--failfast|--catch|--buffer|--locals|--durations=\d+",
    frozenset({"-k"}),
    positionals=_relative_path,
)
_MAKE_OPTIONS = r"-[ksB]+|-j\d*|--jobs=\d+|--keep-going|--silent|--quiet|--always-make"
"""Not ``-f``, ``-C``, ``-I``, ``--eval`` (other makefiles, other code), nor ``VAR=value`` (``SHELL=``)."""
_CARGO = (
    r"--release|-r|--all-targets|--all-features|--no-default-features|--workspace|--locked|--offline|--frozen"
    r"|-q|--quiet|-v|-vv|--verbose|--lib|--bins|--tests|--examples|--benches|--doc|--no-run|--no-fail-fast"
    r"|--keep-going|-j\d+|--(features|package|bin|test|example|jobs)=[^-].*|--message-format=(short|human|json)"
    r"|--color=(auto|always|never)"
)
"""Not ``--config`` (sets runners and wrappers), ``-Z``, ``--manifest-path``, ``--target-dir``, ``--``."""
_CARGO_VALUED = frozenset({"-p", "--package", "-F", "--features", "--bin", "--test", "--example", "-j", "--jobs"})
_CARGO_WHAT = "with package, feature and profile options only (no config, manifest or output directory)"
_GO = (
    r"-v|-race|-short|-cover|-failfast|-json|-benchmem|-trimpath|-count=\d+|-(run|skip|bench)=[^-].*"
    r"|-timeout=\w+|-p=\d+|-parallel=\d+|-tags=[A-Za-z0-9_,]+|-mod=(readonly|vendor|mod)"
)
"""Not ``-exec``, ``-toolexec``, ``-vettool`` (run a program), ``-o``, ``-*profile`` (write), ``-ldflags``,
``-gcflags``, ``-overlay``, ``-modfile``, ``-args``; packages only local ones."""
_GO_WHAT = "with local packages (`.`, `./...`) and flags that run no other program and write no file"

_PYTHON_TOOLS: dict[tuple[str, ...], ArgumentRule] = {
    ("pytest",): _PYTEST,
    ("mypy",): _MYPY,
    ("ruff", "check"): _RUFF_CHECK,
    (PYTHON, "-m", "pytest"): _PYTEST,
    (PYTHON, "-m", "mypy"): _MYPY,
    (PYTHON, "-m", "unittest"): _UNITTEST,
}
"""Also under ``uv run`` and ``poetry run`` (right after ``run``: no ``--with``, which installs packages)."""

SCOPED_COMMANDS: Mapping[tuple[str, ...], ArgumentRule] = {
    ("git", "status"): ArgumentRule(
        _READ,
        r"-[sbvz]+|--short|--branch|--porcelain(=v[12])?|--long|--verbose|-u(no|normal|all)?"
        r"|--untracked-files=(no|normal|all)|--ignored|--show-stash|--ahead-behind|--no-ahead-behind|--renames"
        r"|--no-renames|--column|--no-column",
        positionals=_relative_path,
        double_dash=True,
    ),
    ("git", "diff"): ArgumentRule(
        _REVS, _DIFF + r"|--cached|--staged|--merge-base", positionals=_relative_path, double_dash=True
    ),
    ("git", "log"): ArgumentRule(
        _REVS, _DIFF + "|" + _LOG, frozenset({"-n"}), positionals=_relative_path, double_dash=True
    ),
    ("git", "show"): ArgumentRule(
        _REVS, _DIFF + "|" + _LOG + r"|-s|--no-patch", positionals=_relative_path, double_dash=True
    ),
    ("git", "blame"): ArgumentRule(
        _REVS,
        r"-L\d+(,[+-]?\d+)?|-[wMCsletfnc]+|--porcelain|--line-porcelain|--root",
        frozenset({"-L"}),
        positionals=_relative_path,
        double_dash=True,
    ),
    ("git", "grep"): ArgumentRule(
        "with a plain pattern, read-only options, revisions and relative paths",
        r"-[nilwcvEFHhILopWqz]+|-[ABC]\d+|--(line-number|ignore-case|count|heading|break|cached|untracked)"
        r"|--max-depth=\d+|--column|--threads=\d+",
        first=_WORD,
        positionals=_relative_path,
        double_dash=True,
    ),
    ("git", "ls-files"): ArgumentRule(
        _READ,
        r"-[cdmoiskuztv]+|--(cached|deleted|modified|others|ignored|stage|unmerged|killed|exclude-standard|directory"
        r"|no-empty-directory|full-name|error-unmatch)",
        positionals=_relative_path,
        double_dash=True,
    ),
    ("git", "rev-parse"): ArgumentRule(
        "with read-only options and revisions",
        r"--show-toplevel|--show-prefix|--show-cdup|--git-dir|--git-common-dir|--absolute-git-dir"
        r"|--is-inside-work-tree|--is-bare-repository|--abbrev-ref(=(strict|loose))?|--short(=\d+)?|--verify|-q"
        r"|--quiet|--symbolic-full-name",
        positionals=_relative_path,
    ),
    ("git", "branch"): ArgumentRule(
        "with listing options only (no branch names)",
        r"-[arvl]+|-vv|--all|--remotes|--verbose|--list|--show-current|--color|--no-color",
    ),
    ("git", "remote"): ArgumentRule("with `-v` only (no names)", r"-v|--verbose"),
    ("ls",): ArgumentRule(
        _READ,
        r"-[aAlhRrtSd1FGgnosiUXc]+|--(all|almost-all|human-readable|recursive|classify|reverse"
        r"|group-directories-first)|--color(=(auto|always|never))?|--sort=(none|size|time|version|extension|name)",
        positionals=_relative_path,
    ),
    ("cat",): ArgumentRule(_READ, r"-[nAbsvETeu]+", positionals=_relative_path),
    ("head",): ArgumentRule(_READ, r"-[nc]\d+|-\d+|-[qv]", frozenset({"-n", "-c"}), positionals=_relative_path),
    ("tail",): ArgumentRule(_READ, r"-[nc]\+?\d+|-\d+|-[qv]", frozenset({"-n", "-c"}), positionals=_relative_path),
    ("wc",): ArgumentRule(_READ, r"-[lwcmL]+|--(lines|words|bytes|chars)", positionals=_relative_path),
    ("grep",): ArgumentRule(
        "with a plain pattern, read-only options and relative paths",
        r"-[nilwcvEFHhILoqxrRs]+|-[ABCm]\d+|--(line-number|ignore-case|count|recursive)"
        r"|--color(=(auto|always|never))?",
        first=_WORD,
        positionals=_relative_path,
    ),
    ("sed",): ArgumentRule(
        "printing numbered lines (`5p`, `1,20p`, `10q`) of relative paths, with `-n`, `-E` or `-s` only",
        r"-[nErsuz]+|--quiet|--silent",
        first=re.compile(r"\d+(,\d+)?p|\d+q"),
        positionals=_relative_path,
    ),
    ("echo",): ArgumentRule("with plain words", r"-n", positionals=_plain_word),
    ("pwd",): ArgumentRule("with no arguments"),
    **_PYTHON_TOOLS,
    **{(runner, "run", *words): rule for runner in ("uv", "poetry") for words, rule in _PYTHON_TOOLS.items()},
    ("make",): ArgumentRule(
        "with only `-j`, `-k`, `-s` or `-B` (the default target; no files or variables)",
        _MAKE_OPTIONS,
    ),
    ("make", NAME): ArgumentRule(
        "with only `-j`, `-k`, `-s` or `-B` (no other targets, files or variables)",
        _MAKE_OPTIONS,
    ),
    **{(npm, "test"): _NO_ARGS for npm in ("npm", "pnpm", "yarn")},
    **{(npm, "run", NAME): _NO_ARGS for npm in ("npm", "pnpm", "yarn")},
    **{(npm, "install"): _NO_ARGS for npm in ("npm", "pnpm", "yarn")},
    ("npm", "ci"): _NO_ARGS,
    **{("cargo", sub): ArgumentRule(_CARGO_WHAT, _CARGO, _CARGO_VALUED) for sub in ("build", "check", "clippy")},
    ("cargo", "test"): ArgumentRule(
        _CARGO_WHAT.replace(" only", " and a test-name filter"),
        _CARGO,
        _CARGO_VALUED,
        positionals=_plain_word,
    ),
    **{("go", sub): ArgumentRule(_GO_WHAT, _GO, positionals=_local_package) for sub in ("build", "test", "vet")},
}
"""The commands whose "Always allow" covers more than the exact text, by their leading words, and what may
follow them (:class:`ArgumentRule`). A word is literal, :data:`NAME` or :data:`PYTHON`; the first may also
be a path to that program (``.venv/bin/pytest``), which then stays in the key. No two keys of one length
may match the same words (a test checks it), so a key names one rule. To add a command, list only options
you have read the manual for; leave out any that writes a file, runs a program or reads a config."""


def permission_scope(command: str) -> tuple[str, str]:
    """The ``(permission_key, permission_label)`` of a command: ``command:<leading words>`` and what the
    rule lets through when the command is in :data:`SCOPED_COMMANDS` and passes its rule, else
    ``command-exact:<command>`` and "exactly this command" (see the module docstring). Two commands get
    the same key only if both passed the same rule; the label says that rule in words."""
    exact = (f"command-exact:{command}", "exactly this command")
    if len(command) > MAX_SCOPED_CHARS:
        return exact
    plain = _HARMLESS_REDIRECT.sub("", command)
    if not _PLAIN.fullmatch(plain):
        return exact
    words = plain.split()  # only spaces and tabs are left, where bash and sh split too
    if not words or any(_EXPANDED_TILDE.search(word) for word in words):
        return exact
    found = _lookup(words)
    if found is None:
        return exact
    length, rule = found
    if not rule.accepts(words[length:]):
        return exact  # no falling back to a shorter entry: the key must say which rule passed
    leading = " ".join(words[:length])
    return f"command:{leading}", f"`{leading}` {rule.what}"


def _lookup(words: list[str]) -> tuple[int, ArgumentRule] | None:
    """The longest :data:`SCOPED_COMMANDS` entry whose key matches the first words: (its length, its rule)."""
    program = os.path.basename(words[0])
    if program in WRAPPERS or program.split(".")[0] in DESTRUCTIVE:  # ``mkfs.ext4`` too
        return None
    best: tuple[int, ArgumentRule] | None = None
    for key, rule in SCOPED_COMMANDS.items():
        longer = best is None or len(key) > best[0]
        if longer and len(key) <= len(words) and all(map(_matches, key, words, [True] + [False] * (len(key) - 1))):
            best = (len(key), rule)
    return best


def _matches(element: str, word: str, first: bool) -> bool:
    """Whether ``word`` fills ``element`` of a key; only the program (``first``) may be a path."""
    if first and "/" in word:  # a path to the program: ``.venv/bin/python``, ``/usr/bin/git``
        parts = word.split("/")
        if ".." in parts or not all(parts[1:]):
            return False
        word = parts[-1]
    if element == NAME:
        return bool(_NAME.fullmatch(word))
    if element == PYTHON:
        return bool(_PYTHON.fullmatch(word))
    return word == element
