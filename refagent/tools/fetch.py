"""``fetch``: read a web page (ACP tool kind ``fetch``), as Markdown for HTML, as it is for text and JSON.

Contract:

- ``url`` is ``http`` or ``https``; the call is a ``GET`` with no cookies, no credentials and no proxy. Any
  other scheme is refused, for the model to read, and so is a URL that could mislead the question (a
  ``user@`` part, spaces, backslashes).
- The user is asked, with the URL (its host first) in the question's title; "always allow" remembers the
  host (``fetch:<host>``, "fetching from <host>"). The plan is :attr:`~refagent.tools.base.Plan.network`:
  every mode asks but ``full-access``, and ``read-only`` asks rather than refusing (a fetch changes nothing).
- It never connects to this machine or its networks: an address that is loopback, private (RFC 1918, unique
  local ``fc00::/7``), link-local (``169.254.0.0/16``, the cloud metadata service, ``fe80::/10``),
  carrier-grade NAT, multicast, unspecified, reserved or otherwise not global is refused, IPv4 inside IPv6
  (mapped, NAT64, 6to4, Teredo) judged as the IPv4 it carries, and so is an IPv4 address written as a
  number (``2130706433``, ``0x7f.1``, ``0177.0.0.1``): spelled so, only to slip past a check. The check is
  made when connecting (:mod:`refagent.tools.fetch_net`): the name is resolved here, every address it resolves to
  must pass, and the connection goes to an address that passed, while the ``Host`` header and TLS (SNI,
  the certificate) keep the name; so a name that resolves again, differently (DNS rebinding), cannot move
  the connection. Each redirect (at most :attr:`FetchLimits.max_redirects`) is checked again, scheme and
  address; one to another host is followed without asking again. The user's config can exempt hosts
  (``allow``: names, addresses, networks).
- Limits (:class:`FetchLimits`): the whole fetch within 30 s (connecting within 10 s), at most 5 MB read;
  the model reads at most ``max_chars`` (default 50,000) characters from ``offset``, with a marker saying
  how to read on.
- HTML becomes Markdown (:func:`html_to_markdown`: scripts, styles, navigation and page chrome dropped,
  the title kept); text (``text/*``, JSON, XML) is returned as it is; anything else (an image, a PDF, a
  binary) is refused, saying its type and size.

``httpx2`` is imported when a fetch runs (in a worker thread, so the event loop does not stall on it), never
with this module: every session builds the tool list.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urljoin, urlsplit

import anyio
import anyio.to_thread

from refagent.child import ChildFailed, Overran, run_in_child
from refagent.errors import ToolError
from refagent.tools.args import arg_int, arg_str, shown
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.fetch_net import FetchLimits, Gate, Refused, Resolver, Unresolved, host_key, vetted_client
from refagent.tools.text import text_content

if TYPE_CHECKING:
    import httpx2

log = logging.getLogger(__name__)

__all__ = ["Fetch", "FetchLimits", "Gate", "html_to_markdown"]

IN_THREAD_HTML = 256 * 1024
"""HTML up to this size is turned into Markdown in a worker thread (well under a second); a larger page in
a child process (:meth:`Fetcher._markdown`)."""
HTML_MEMORY = 2 << 30
"""The address space of that child: a 5 MB page's tree takes a few hundred MB."""
DEFAULT_MAX_CHARS = 50_000
MAX_MAX_CHARS = 200_000
REDIRECTS = frozenset({301, 302, 303, 307, 308})
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/javascript", "application/x-ndjson"})


# -- the page ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """What a fetch brought back: the final URL, the status, the media type, and the text."""

    url: str
    status: int
    media_type: str
    text: str
    title: str = ""
    redirects: tuple[str, ...] = ()
    html: bytes | None = None
    """An HTML page as it came, until it is turned into Markdown (:meth:`Fetcher.get` does, then drops it)."""
    charset: str | None = None


NOISE = (
    "script, style, noscript, template, iframe, object, embed, svg, canvas, nav, aside, form, button, select, "
    "textarea, dialog, [hidden], [aria-hidden=true], [role=navigation], [role=banner], [role=contentinfo]"
)
"""What a page shows no reader who wants its text: code, styling, menus, forms, what is hidden."""
CHROME = "body > header, body > footer"
"""The page's own header and footer (an article's are kept)."""


def html_to_markdown(data: bytes, charset: str | None, base: str = "") -> tuple[str, str]:
    """``(title, markdown)`` of an HTML document: the title element's text, and the main content as Markdown
    (``<main>`` when the page has exactly one, else the body), with :data:`NOISE` and :data:`CHROME` dropped,
    and links made absolute against ``base`` (the page's URL), so the model can fetch them.
    CPU-bound: run it in a worker thread."""
    # here: BeautifulSoup and markdownify take ~100 ms to import, and only fetch needs them
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(data, "html.parser", from_encoding=charset)
    title = soup.title.get_text(" ", strip=True) if soup.title is not None else ""
    for element in soup.select(f"{NOISE}, {CHROME}, head"):
        element.decompose()
    for link in soup.select("a[href]") if base else ():
        link["href"] = urljoin(base, str(link["href"]))
    for image in soup.select("img[src^='data:']"):  # an inline image is kilobytes of base64, no words
        del image["src"]
    mains = soup.find_all("main")
    root = mains[0] if len(mains) == 1 else (soup.body or soup)
    try:
        markdown = MarkdownConverter(heading_style="ATX", bullets="-").convert_soup(root)
    except RecursionError:  # nested deeper than the converter can walk: the page's text, without the Markdown
        markdown = root.get_text("\n", strip=True)
    markdown = re.sub(r"\n{3,}", "\n\n", re.sub(r"[ \t]+\n", "\n", markdown)).strip()
    if title and not markdown.startswith("# "):
        markdown = f"# {title}\n\n{markdown}"
    return title, markdown


def markdown_for_child(request: dict[str, Any], data: bytes) -> dict[str, str]:
    """The child's side of :meth:`Fetcher._markdown` (:func:`refagent.child.run_in_child`)."""
    title, markdown = html_to_markdown(data, request["charset"], request["base"])
    return {"title": title, "markdown": markdown}


def media_type(content_type: str) -> tuple[str, str | None]:
    """``(type, charset)`` from a Content-Type header value, the type in lower case."""
    kind, _, rest = content_type.partition(";")
    charset = None
    for parameter in rest.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return kind.strip().lower(), charset


def is_text(kind: str) -> bool:
    return kind.startswith("text/") or kind in TEXT_TYPES or kind.endswith(("+json", "+xml"))


def sniffed(data: bytes) -> str:
    """A media type for a body served without one: HTML, text, or ``application/octet-stream``."""
    head = data[:512].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "text/html"
    if b"\x00" in data[:8192]:
        return "application/octet-stream"
    try:
        data[:8192].decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < 8188:  # not a character cut by the 8192nd byte
            return "application/octet-stream"
    return "text/plain"


def decoded(data: bytes, charset: str | None) -> str:
    try:
        return data.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return data.decode("utf-8", errors="replace")


def size_words(size: int | None) -> str:
    if size is None:
        return "size not given"
    if size < 1024:
        return f"{size:,} bytes"
    return f"{size / 1024 / 1024:.1f} MB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KB"


class Fetcher:
    """One fetch: redirects followed by hand, each hop through the :class:`Gate`, within the limits."""

    def __init__(self, gate: Gate, limits: FetchLimits) -> None:
        self.gate = gate
        self.limits = limits

    async def get(self, url: str) -> Page:
        """The page at ``url``; ToolError (for the model) when it cannot be read or is refused."""
        client = await anyio.to_thread.run_sync(vetted_client, self.gate, self.limits)
        try:
            with anyio.fail_after(self.limits.total_seconds):
                page = await self._follow(client, url)
        except TimeoutError:
            raise ToolError(
                f"{url} did not answer in full within {self.limits.total_seconds:g} s (fetch's time limit)."
            ) from None
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()
        if page.html is None:
            return page
        title, text = await self._markdown(page.html, page.charset, page.url)
        return dataclasses.replace(page, text=text, title=title, html=None, charset=None)

    async def _markdown(self, data: bytes, charset: str | None, url: str) -> tuple[str, str]:
        """``(title, markdown)`` of the HTML ``data`` (:func:`html_to_markdown`): in a worker thread when it is
        small, else in a child process (:mod:`refagent.child`) stopped after the limits' ``convert_seconds``
        or when the call is cancelled (a large or deeply built page can take many seconds of CPU, which in
        a thread would slow every session and could not be stopped)."""
        if len(data) <= IN_THREAD_HTML:
            return await anyio.to_thread.run_sync(html_to_markdown, data, charset, url, abandon_on_cancel=True)
        seconds = self.limits.convert_seconds
        request = {"charset": charset, "base": url}
        try:
            answer = await run_in_child(
                __name__, "markdown_for_child", request, data=data, seconds=seconds, memory=HTML_MEMORY
            )
        except Overran:
            raise ToolError(
                f"{url} is {size_words(len(data))} of HTML, and turning it into text took longer than {seconds:g} s: "
                "it was stopped. Look for a smaller page (a printable or text version, a single section)."
            ) from None
        except ChildFailed as exc:
            log.warning("converting %s failed: %s", url, exc)
            raise ToolError(f"{url} is {size_words(len(data))} of HTML that could not be turned into text.") from None
        return str(answer["title"]), str(answer["markdown"])

    async def _follow(self, client: httpx2.AsyncClient, url: str) -> Page:
        import httpx2  # here: loaded by now (vetted_client, in a worker thread)

        parsed = httpx2.URL(url)
        if host_key(parsed.host) != host_key(urlsplit(url).hostname or ""):
            # the user was asked about the host as urlsplit reads it: the request must go there, or nowhere
            raise ToolError(f"The URL {shown(url, 200)} names its host ambiguously; write it plainly.")
        hops: list[str] = []
        first_host = host_key(urlsplit(url).hostname or "")
        while True:
            try:
                async with client.stream("GET", url) as response:
                    location = response.headers.get("location")
                    if response.status_code in REDIRECTS and location:
                        target = str(response.url.join(location))
                        if len(hops) >= self.limits.max_redirects:
                            raise ToolError(
                                f"{hops[0] if hops else url} redirects more than {self.limits.max_redirects} times "
                                f"(the last to {shown(target, 200)}); fetch stops there."
                            )
                        checked = checked_url(target, self.gate, redirect=True)
                        if host_key(urlsplit(checked).hostname or "") != first_host:
                            # The user allowed this host, not the one it sends to: the model fetches that URL
                            # itself, which asks about its host (an open redirect must not widen an "always").
                            raise ToolError(
                                f"{url} redirects to another host: {shown(checked, 200)}. Fetch that URL to "
                                "follow it (the user is asked about its host)."
                            )
                        hops.append(url)
                        url = checked
                        continue
                    return await self._read(response, url, tuple(hops))
            except Refused as exc:
                via = f" (redirected from {hops[-1]})" if hops else ""
                raise ToolError(f"Refused to connect to {url}{via}: {exc}") from None
            except Unresolved as exc:
                raise ToolError(f"Could not fetch {url}: {exc}") from None
            except httpx2.TimeoutException:
                raise ToolError(f"{url} timed out (connecting within {self.limits.connect_seconds:g} s).") from None
            except httpx2.HTTPError as exc:
                # here: only on a failure; its reasons read the exception's causes (socket, ssl)
                from refagent.llm.retry import connection_problem

                raise ToolError(f"Could not fetch {url}: {connection_problem(exc).what}.") from None

    async def _read(self, response: httpx2.Response, url: str, hops: tuple[str, ...]) -> Page:
        kind, charset = media_type(response.headers.get("content-type", ""))
        length_header = response.headers.get("content-length", "")
        length = int(length_header) if length_header.isdigit() else None
        limit = self.limits.max_bytes
        if kind and not is_text(kind) and kind not in HTML_TYPES:
            raise ToolError(
                f"{url} is {kind} ({size_words(length)}), not a web page or text: fetch reads HTML, text and JSON only."
            )
        if length is not None and length > limit:
            raise ToolError(f"{url} is {size_words(length)}, over fetch's limit of {size_words(limit)}.")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > limit:
                raise ToolError(f"{url} is larger than fetch's limit of {size_words(limit)}; it was not read.")
        data = bytes(body)
        if not kind:
            kind = sniffed(data)
            if kind == "application/octet-stream":
                raise ToolError(f"{url} has no content type and is not text ({size_words(len(data))}).")
        if kind in HTML_TYPES:  # turned into Markdown once the fetch's clock has stopped (Fetcher.get)
            return Page(str(response.url), response.status_code, kind, "", "", hops, html=data, charset=charset)
        return Page(str(response.url), response.status_code, kind, decoded(data, charset), "", hops)


def checked_url(url: str, gate: Gate, *, redirect: bool = False) -> str:
    """``url`` if fetch may try it (an http or https URL with a host that is not a forbidden address);
    else ToolError, for the model."""
    if any(char.isspace() or char == "\\" or not char.isprintable() for char in url):
        raise ToolError(f"The URL {shown(url, 200)} holds spaces, backslashes or control characters; encode them.")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 -- raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ToolError(f"The URL {shown(url, 200)} is not valid ({exc}).") from None
    if parts.scheme.lower() not in ("http", "https"):
        scheme = f"{parts.scheme}:" if parts.scheme else "no scheme"
        raise ToolError(
            f"{'A redirect to ' + shown(url, 200) if redirect else 'The URL'} has {scheme}; fetch reads http and "
            "https URLs only."
        )
    if not host:
        raise ToolError(f"The URL {shown(url, 200)} has no host.")
    if parts.username is not None or parts.password is not None:
        raise ToolError(
            f"The URL {shown(url, 200)} holds a user name or password (`user@host`): fetch sends no credentials; "
            "leave them out."
        )
    try:
        gate.check_literal(host)
    except Refused as exc:
        raise ToolError(f"Refused: {'a redirect to ' if redirect else ''}{shown(url, 200)}: {exc}") from None
    return url


# -- the tool ----------------------------------------------------------------------------------------


class Fetch(BaseTool):
    """``fetch``. ``allow``: hosts, addresses and networks that may be reached though not public (the user's
    config); ``resolver``: how names become addresses (a test's fake, else the system's)."""

    name = "fetch"
    description = (
        "Fetch a web page by URL (http or https; a GET) and read it: HTML as Markdown (menus, scripts and styles "
        "dropped), text and JSON as they are. Images, PDFs and other binaries are refused. The user is asked "
        "first. Public addresses only. Reads at most 5 MB within 30 s, follows up to 5 redirects; returns at "
        f"most `max_chars` characters (default {DEFAULT_MAX_CHARS:,}) from `offset`: the result says how to "
        "read on."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The URL, e.g. `https://docs.python.org/3/library/re.html`."},
            "max_chars": {
                "type": "integer",
                "description": f"Characters to return at most (default {DEFAULT_MAX_CHARS:,}, at most "
                f"{MAX_MAX_CHARS:,}).",
                "minimum": 1,
            },
            "offset": {
                "type": "integer",
                "description": "The first character to return, 0-based (default 0): to read on past a cut.",
                "minimum": 0,
            },
        },
        "required": ["url"],
        "additionalProperties": False,
    }
    kind = "fetch"

    def __init__(
        self, allow: Iterable[str] = (), resolver: Resolver | None = None, limits: FetchLimits | None = None
    ) -> None:
        self.gate = Gate(allow, resolver)
        self.limits = limits or FetchLimits()

    def title(self, args: dict[str, Any]) -> str:
        return f"Fetch {shown(args.get('url', ''), 120)}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        url = checked_url(arg_str(args, "url").strip(), self.gate)
        max_chars = arg_int(args, "max_chars", DEFAULT_MAX_CHARS, minimum=1, maximum=MAX_MAX_CHARS)
        offset = arg_int(args, "offset", 0, minimum=0, maximum=1 << 40)
        host = host_key(urlsplit(url).hostname or "")
        fetcher = Fetcher(self.gate, self.limits)
        title = f"Fetch {shown(url, 120)}"
        if host not in title.lower():  # a host too long for the title: the question still names it
            title += f" (from {shown(host, 80)})"

        async def execute() -> ToolResult:
            page = await fetcher.get(url)
            return result(page, offset, max_chars)

        return Plan(
            title=title,
            execute=execute,
            network=True,
            permission_key=f"fetch:{host}",
            permission_label=f"fetching from {shown(host, 80)}",
        )


def result(page: Page, offset: int, max_chars: int) -> ToolResult:
    """What the model reads of ``page`` (a header, then ``max_chars`` characters from ``offset``, then how to
    read on), and what the editor shows (that text, as Markdown)."""
    total = len(page.text)
    window = page.text[offset : offset + max_chars]
    end = offset + len(window)
    lines = [f"URL: {page.url}"]
    if page.redirects:
        lines.append(f"Redirected from: {page.redirects[0]}")
    converted = "; converted to Markdown" if page.media_type in HTML_TYPES else ""
    lines.append(f"Status: {page.status}; content type: {page.media_type}{converted}")
    if page.title:
        lines.append(f"Title: {page.title}")
    if offset >= total and total:
        note = f"[Nothing from offset {offset:,}: the text is {total:,} characters.]"
    elif end < total:
        note = f"[Cut: characters {offset:,} to {end:,} of {total:,}. To read on, fetch again with offset={end}.]"
    elif offset:
        note = f"[Characters {offset:,} to {end:,} of {total:,}: the end.]"
    else:
        note = ""
    output = "\n".join(lines) + "\n\n" + (window or "(empty)") + (f"\n\n{note}" if note else "")
    raw = {"url": page.url, "status": page.status, "contentType": page.media_type, "chars": total, "offset": offset}
    shown_text = window + (f"\n\n{note}" if note else "")
    return ToolResult(
        output, content=[text_content(shown_text or "(empty)")], raw_output=raw, failed=page.status >= 400
    )
