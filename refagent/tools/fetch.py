"""``fetch``: read a web page (ACP tool kind ``fetch``), as Markdown for HTML, as it is for text and JSON.

Contract:

- ``url`` is ``http`` or ``https``; the call is a ``GET`` with no cookies, no credentials of the user's and
  no proxy. Any other scheme is refused, for the model to read.
- The user is asked, with the URL (its host first) in the question's title; "always allow" remembers the
  host (``fetch:<host>``, "fetching from <host>"). The plan is :attr:`~refagent.tools.base.Plan.network`:
  every mode asks but ``full-access``, and ``read-only`` asks rather than refusing (a fetch changes nothing).
- It never connects to this machine or its networks: an address that is loopback, private (RFC 1918, unique
  local ``fc00::/7``), link-local (``169.254.0.0/16``, the cloud metadata service, ``fe80::/10``),
  carrier-grade NAT, multicast, unspecified, reserved or otherwise not global is refused, IPv4 inside IPv6
  (mapped, NAT64, 6to4, Teredo) judged as the IPv4 it carries, and so is an IPv4 address written as a
  number (``2130706433``, ``0x7f.1``, ``0177.0.0.1``): spelled so, only to slip past a check. The check is
  made when connecting (:class:`_VettedBackend`): the name is resolved here, every address it resolves to
  must pass, and the connection goes to an address that passed, while the ``Host`` header and TLS (SNI,
  the certificate) keep the name; so a name that resolves again, differently (DNS rebinding), cannot move
  the connection. Each redirect (at most :attr:`FetchLimits.max_redirects`) is checked again, scheme and
  address. The user's config can exempt hosts (``allow``: names, addresses, networks).
- Limits (:class:`FetchLimits`): the whole fetch within 30 s (connecting within 10 s), at most 5 MB read;
  the model reads at most ``max_chars`` (default 50,000) characters from ``offset``, with a marker saying
  how to read on.
- HTML becomes Markdown (:func:`html_to_markdown`: scripts, styles, navigation and page chrome dropped,
  the title kept); text (``text/*``, JSON, XML) is returned as it is; anything else (an image, a PDF, a
  binary) is refused, saying its type and size.

``httpx2`` is imported when a fetch runs (in a worker thread, so the event loop does not stall on it), never
with this module: the tool list is built before the first answer.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urljoin, urlsplit

import anyio
import anyio.to_thread

from refagent.errors import ToolError
from refagent.tools.args import arg_int, arg_str, shown
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.text import text_content

if TYPE_CHECKING:
    import httpcore2
    import httpx2

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""How a host name becomes addresses: ``(host, port) -> [address, ...]``. The default asks the system
(:func:`system_resolver`); tests give their own, to make a name resolve to a private address."""

DEFAULT_MAX_CHARS = 50_000
MAX_MAX_CHARS = 200_000
REDIRECTS = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "refagent-fetch (+https://github.com/REPLACE-ME/refagent)"
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/javascript", "application/x-ndjson"})
CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


@dataclass(frozen=True)
class FetchLimits:
    """What one fetch may take. The README states the defaults."""

    total_seconds: float = 30.0
    """The whole fetch, redirects included, from the first connection to the last byte."""
    connect_seconds: float = 10.0
    max_bytes: int = 5 * 1024 * 1024
    """Of the response body, as received: a larger one is refused, not cut (half a page misleads)."""
    max_redirects: int = 5


class Refused(Exception):
    """A connection the address rules refuse; its message is for the model."""


class Unresolved(Exception):
    """A host name that resolves to nothing; its message is for the model."""


# -- the address rules ------------------------------------------------------------------------------


def forbidden(address: Address) -> str | None:
    """Why ``address`` may not be reached (``"loopback"``, ``"private"``, ...), or None if it is global."""
    if isinstance(address, ipaddress.IPv6Address):
        # IPv4 carried in IPv6 reaches that IPv4 (mapped: this host's own stack; the others, a gateway).
        carried = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if carried is None and address in NAT64:
            carried = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if carried is not None:
            why = forbidden(carried)
            return f"{why} (IPv4 {carried} inside IPv6)" if why else None
        if address.is_site_local:
            return "site-local"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local (where cloud metadata services answer)"
    if isinstance(address, ipaddress.IPv4Address) and address in CGNAT:
        return "carrier-grade NAT"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    if not address.is_global:
        return "special-purpose, not public"
    return None


def numeric_ipv4(host: str) -> bool:
    """Whether ``host`` is an IPv4 address written other than as four decimal numbers: as the C library
    reads ``2130706433``, ``0x7f000001``, ``127.1`` or ``0177.0.0.1``."""
    if not host or not all(c in "0123456789abcdefx." for c in host.lower()):
        return False
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return True
    return False


def literal(host: str) -> Address | None:
    """``host`` as an IP address, if it is one (an IPv6 zone, ``fe80::1%eth0``, is kept out of the check)."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


class Gate:
    """The address rules for one tool: what may be connected to, and what ``allow`` exempts.

    ``allow`` holds host names (``wiki.internal``: whatever they resolve to), addresses (``127.0.0.1``) and
    networks (``10.1.0.0/16``) the user's config lets a fetch reach though they are not public.
    """

    def __init__(self, allow: Iterable[str] = (), resolver: Resolver | None = None) -> None:
        names: set[str] = set()
        networks: list[Network] = []
        for entry in allow:
            try:
                networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                names.add(host_key(entry))
        self.names: frozenset[str] = frozenset(names)
        """Exempt by name: what the URL names, as its host (ASCII: an IDN's ``xn--`` form)."""
        self.networks: tuple[Network, ...] = tuple(networks)
        self.resolver = resolver or system_resolver

    def check_literal(self, host: str) -> None:
        """Refused unless ``host``, if it is written as an address, is one the rules let through. Names pass
        (they are checked when connecting): this runs before the user is asked, with no DNS."""
        if numeric_ipv4(host):
            raise Refused(
                f"{host} is an IPv4 address written as a number, a form fetch refuses; write it as four decimal "
                "numbers (a.b.c.d)."
            )
        address = literal(host)
        if address is not None:
            self._check(host, address)

    def _check(self, host: str, address: Address) -> None:
        if host_key(host) in self.names or any(address in network for network in self.networks):
            return
        why = forbidden(address)
        if why is not None:
            named = "" if str(address) == host else f"{host} resolves to {address}, which is "
            raise Refused(
                f"{named or str(address) + ' is '}a {why} address: fetch reaches only public addresses "
                "(the user's config can allow a host)."
            )

    async def vet(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for ``host``: every one it resolves to must pass, else Refused."""
        self.check_literal(host)
        address = literal(host)
        if address is not None:
            return [str(address)]
        found = list(dict.fromkeys(await self.resolver(host, port)))
        if not found:
            raise Unresolved(f"{host} resolves to no address.")
        checked: list[str] = []
        for text in found:
            resolved = literal(text)
            if resolved is None:
                raise Refused(f"{host} resolves to {text!r}, which is not an address.")
            self._check(host, resolved)
            checked.append(str(resolved))
        return checked


def host_key(host: str) -> str:
    """A host as permissions and the allow-list compare it: lower case, no trailing dot, no IPv6 brackets."""
    return host.strip().strip("[]").rstrip(".").lower()


async def system_resolver(host: str, port: int) -> list[str]:
    """The system's addresses for ``host`` (IPv4 and IPv6), in its order."""
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise Unresolved(f"the host name {host} was not found (DNS: {exc.strerror}); check the URL.") from None
    return [str(info[4][0]) for info in infos]


# -- the connection ----------------------------------------------------------------------------------


def _client(gate: Gate, limits: FetchLimits) -> httpx2.AsyncClient:
    """An HTTP client whose every connection goes through ``gate`` (run in a worker thread: it imports
    ``httpx2`` and builds an SSL context, tens of milliseconds)."""
    # here: ~50 ms of imports, kept off the tool list's import and the event loop (this runs in a thread)
    import httpcore2
    import httpx2

    @contextlib.contextmanager
    def mapped() -> Iterator[None]:
        """httpcore2's errors as httpx2's, as httpx2's own transport raises them (by the same names)."""
        try:
            yield
        except Exception as exc:
            if type(exc).__module__.split(".")[0] != "httpcore2":
                raise
            raise getattr(httpx2, type(exc).__name__, httpx2.TransportError)(str(exc)) from exc

    class VettedBackend(httpcore2.AsyncNetworkBackend):
        """Connects to addresses ``gate`` vetted, never to the name: the name's TLS and ``Host`` header
        stay as they were (httpcore2 starts TLS with the URL's host as ``server_hostname``)."""

        def __init__(self) -> None:
            self.inner = httpcore2.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,  # noqa: ASYNC109 -- httpcore2's interface
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> httpcore2.AsyncNetworkStream:
            failure: Exception | None = None
            for address in await gate.vet(host, port):
                try:
                    return await self.inner.connect_tcp(address, port, timeout, local_address, socket_options)
                except httpcore2.ConnectError as exc:  # the next address, as a browser does
                    failure = exc
            assert failure is not None
            raise failure

        async def connect_unix_socket(
            self,
            path: str,
            timeout: float | None = None,  # noqa: ASYNC109 -- httpcore2's interface
            socket_options: Iterable[Any] | None = None,
        ) -> httpcore2.AsyncNetworkStream:
            raise Refused("fetch connects to no local socket.")

        async def sleep(self, seconds: float) -> None:
            await self.inner.sleep(seconds)

    class VettedTransport(httpx2.AsyncBaseTransport):
        """httpx2's transport, on :class:`VettedBackend` (``AsyncHTTPTransport`` takes no backend)."""

        def __init__(self) -> None:
            self.pool = httpcore2.AsyncConnectionPool(
                ssl_context=httpx2.create_ssl_context(trust_env=False),
                network_backend=VettedBackend(),
                max_connections=2,
            )

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            assert isinstance(request.stream, httpx2.AsyncByteStream)
            core = httpcore2.Request(
                method=request.method,
                url=httpcore2.URL(
                    scheme=request.url.raw_scheme,
                    host=request.url.raw_host,
                    port=request.url.port,
                    target=request.url.raw_path,
                ),
                headers=request.headers.raw,
                content=request.stream,
                extensions=request.extensions,
            )
            with mapped():
                response = await self.pool.handle_async_request(core)
            assert isinstance(response.stream, AsyncIterable)
            stream: AsyncIterable[bytes] = response.stream

            class Body(httpx2.AsyncByteStream):
                async def __aiter__(self) -> AsyncIterator[bytes]:
                    with mapped():
                        async for chunk in stream:
                            yield chunk

                async def aclose(self) -> None:
                    closing = getattr(stream, "aclose", None)
                    if closing is not None:
                        await closing()

            return httpx2.Response(
                status_code=response.status, headers=response.headers, stream=Body(), extensions=response.extensions
            )

        async def aclose(self) -> None:
            await self.pool.aclose()

    timeout = httpx2.Timeout(limits.total_seconds, connect=limits.connect_seconds)
    return httpx2.AsyncClient(
        transport=VettedTransport(),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,  # no proxy from the environment: it would connect where the gate did not look
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
    )


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
    markdown = MarkdownConverter(heading_style="ATX", bullets="-").convert_soup(root)
    markdown = re.sub(r"\n{3,}", "\n\n", re.sub(r"[ \t]+\n", "\n", markdown)).strip()
    if title and not markdown.startswith("# "):
        markdown = f"# {title}\n\n{markdown}"
    return title, markdown


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
        client = await anyio.to_thread.run_sync(_client, self.gate, self.limits)
        try:
            with anyio.fail_after(self.limits.total_seconds):
                return await self._follow(client, url)
        except TimeoutError:
            raise ToolError(
                f"{url} did not answer in full within {self.limits.total_seconds:g} s (fetch's time limit)."
            ) from None
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def _follow(self, client: httpx2.AsyncClient, url: str) -> Page:
        import httpx2  # here: loaded by now (_client, in a worker thread)

        parsed = httpx2.URL(url)
        if host_key(parsed.host) != host_key(urlsplit(url).hostname or ""):
            # the user was asked about the host as urlsplit reads it: the request must go there, or nowhere
            raise ToolError(f"The URL {shown(url, 200)} names its host ambiguously; write it plainly.")
        hops: list[str] = []
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
                        hops.append(url)
                        url = checked_url(target, self.gate, redirect=True)
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
        if kind in HTML_TYPES:
            title, text = await anyio.to_thread.run_sync(
                html_to_markdown, data, charset, str(response.url), abandon_on_cancel=True
            )
        else:
            title, text = "", decoded(data, charset)
        return Page(str(response.url), response.status_code, kind, text, title, hops)


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
