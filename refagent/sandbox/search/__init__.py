"""The search engines behind ``glob`` and ``grep`` (:mod:`refagent.tools.search`): which files a search
visits and what it finds in them, on the local disk. Nothing here imports ``refagent.tools``.

Both engines, ripgrep (``rg``) when it can be found and a pure-Python walker otherwise, give the same
results for the same tree (the tests run both on one tree), so the fallback is a real implementation,
not a degraded mode. The rules, all ripgrep's (``rg --hidden --no-ignore-dot --no-ignore-exclude
--no-ignore-global -g '!.git'``):

- ``.git`` is never entered; other hidden files and directories are searched; symlinks are not followed.
  The agent's own temporary files (an atomic write's ``.~refagent-*.tmp``, left behind if the agent was
  killed during it) are never listed nor searched.
- ``.gitignore`` files are respected inside a git repository (a directory with ``.git``), from the
  repository's top down, as git does; a nested repository starts afresh. Outside any repository they are
  not (ripgrep's default). ``.ignore``, ``.git/info/exclude`` and global excludes are not used. Their
  lines, and ``glob``, are read as ripgrep reads them: :mod:`refagent.sandbox.disk.gitignore`'s ``rg`` dialect.
- A ``glob`` is gitignore-style: without a slash it matches a file name at any depth (``*.py``), with one
  it is anchored at the searched directory (``src/**/*.ts``); ``{a,b}`` alternatives work. As in ripgrep,
  a file a glob names is included even if ``.gitignore`` lists it, but ignored directories stay pruned.
- grep treats a file with a NUL byte as binary and skips it (ripgrep may print matches found before the
  NUL; those are dropped so both engines agree).
- Results are by path relative to the searched directory, in no order (ripgrep searches in parallel);
  a search stops past :data:`~refagent.sandbox.search.limits.HARD_LIMIT` and says it is incomplete.
  Sorting, showing and capping them for the model is the tools' part.

The regex dialect is Rust's (``regex`` crate) with ripgrep and Python's ``re`` in the fallback. They agree
on the common syntax (classes, ``\\d\\w\\s\\b``, groups, ``(?i)``, lazy quantifiers). ``\\z`` and ``(?<name>``
are translated for Python. A pattern ripgrep rejects but Python accepts (look-around, back-references)
is run by the fallback engine, so the model gets results rather than a dialect error. Matching is per
line: a pattern cannot match across lines. Bytes that are not UTF-8 are shown as U+FFFD by both; ripgrep
matches them with nothing (not even ``.``), Python with what matches U+FFFD.

The tree being searched is untrusted (a cloned repository), and so is the pattern (the model's):

- Only regular files are ever opened: not FIFOs, sockets or devices, which could block a read forever
  or never end. The walker sees each entry's type before opening it and checks it again with ``fstat``
  after a non-blocking open; ripgrep skips them when it walks, and a file named as the target is opened
  first and given to ripgrep on its standard input. ripgrep reads every ``.gitignore`` on its way
  (ancestors too) by following links and without a size limit, so a tree where one is not a plain
  regular file within :data:`~refagent.sandbox.disk.gitignore.MAX_IGNORE_BYTES` (a FIFO, a link to ``/dev/zero``)
  is searched by the Python engine instead, which reads only those (and a linked one only when it
  leads inside the roots).
- Nothing outside the searched directory is read through a link swapped in after the path was
  checked: the Python engine walks with directory descriptors (``O_NOFOLLOW``), ripgrep starts in the
  directory reached the same way (``/proc/self/fd/N``) and every file it reports is checked afterwards
  to be where it says (a real path inside the directory, not a link), else dropped.
- ripgrep's regex engine runs in linear time. Python's backtracks, and a pattern such as ``(a+)+$``
  takes exponential time (with the GIL held): the Python engine runs in a child process that is
  killed at a time limit, and the model is told to simplify the pattern. Glob matching is linear
  (:class:`refagent.sandbox.disk.globs.GlobMatcher`).

The modules, each importing only those before it (and the rest of the sandbox):

- :mod:`~refagent.sandbox.search.limits`: the limits both engines share (what a search asks and finds,
  ``Query`` and ``Hits``, is :mod:`refagent.sandbox.seams`' vocabulary).
- :mod:`~refagent.sandbox.search.walk`: the walker, by the rules above, and the careful opening of
  what it lists.
- :mod:`~refagent.sandbox.search.ripgrep`: running ``rg`` and reading what it prints.
- :mod:`~refagent.sandbox.search.python_engine`: the pure-Python engine, and the child process it runs
  in with a deadline.
- :mod:`~refagent.sandbox.search.dispatch`: ``search`` and ``list_files``, which choose the engine, and
  :class:`~refagent.sandbox.search.dispatch.LocalSearch`, the :class:`~refagent.sandbox.seams.Search` a local sandbox
  gives its tools.
"""
