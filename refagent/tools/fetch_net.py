"""Where ``fetch`` (:mod:`refagent.tools.fetch`) may connect, and the connection that holds to it.

Contract: :func:`forbidden` says why an address may not be reached (loopback, private, link-local, carrier-grade
NAT, multicast, unspecified, reserved, not global; IPv4 carried in IPv6 judged as that IPv4); a :class:`Gate`
applies it with the user's exemptions (``allow``: names, addresses, networks) to a URL's host before asking
(:meth:`Gate.check_literal`: no DNS) and when connecting (:meth:`Gate.vet`: every address the name resolves
to must pass); :func:`vetted_client` builds the ``httpx2`` client whose every connection goes through the gate and
to an address it passed, so a name resolved again, differently, cannot move it (DNS rebinding). IPv4
written as a number (``2130706433``, ``0x7f.1``, ``0177.0.0.1``) is refused, whatever it spells.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    import httpcore2
    import httpx2

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""How a host name becomes addresses: ``(host, port) -> [address, ...]``. The default asks the system
(:func:`system_resolver`); tests give their own, to make a name resolve to a private address."""

USER_AGENT = "refagent-fetch (+https://github.com/REPLACE-ME/refagent)"
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
    convert_seconds: float = 20.0
    """Turning a large HTML page into Markdown, after the fetch (a child process stopped then)."""


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


def vetted_client(gate: Gate, limits: FetchLimits) -> httpx2.AsyncClient:
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
