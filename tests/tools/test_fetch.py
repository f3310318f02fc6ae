"""The fetch tool against real HTTP servers on 127.0.0.1 (no other network): what it reads and how, its
limits, the address rules (literal forms, names resolved by a fake resolver, rebinding, redirects), and the
permission question on the wire, validated against the ACP schema.

The servers listen on 127.0.0.1, which the rules refuse: the tools that must reach them are given
``allow=["127.0.0.1"]``, as a user's config would allow a host; every other address keeps the rules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from refagent.errors import ToolError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.settings import OwnSandboxes, Settings
from refagent.testing.memory import FakeClient, allow_once, connect, select
from refagent.tools.fetch import IN_THREAD_HTML, Fetch, FetchLimits
from refagent.tools.fetch_net import forbidden, numeric_ipv4
from tests.support.tool_fakes import bare_sandbox, call, make_ctx

pytestmark = pytest.mark.anyio

LOCAL = ["127.0.0.1"]
"""What the tools that reach the test servers allow, as a user's config would."""
QUICK = FetchLimits(total_seconds=1.0, connect_seconds=1.0, max_bytes=10_000, max_redirects=3)

PAGE = b"""<!doctype html>
<html><head><title>The Test Page</title><style>body { color: red }</style>
<script>var secret = "in a script";</script></head>
<body>
<header><a href="/">Home</a> | <a href="/about">About</a></header>
<nav><ul><li>Menu one</li><li>Menu two</li></ul></nav>
<main><h1>Welcome</h1><p>Some <strong>bold</strong> words and <a href="/docs/a.html">a link</a>.</p>
<ul><li>first</li><li>second</li></ul><pre><code>x = 1</code></pre></main>
<footer>Copyright nobody</footer>
</body></html>"""
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 200
JSON_BODY = b'{"name": "refagent", "list": [1, 2, 3]}'


DEEP = b"<html><body>" + b"<div>" * 5000 + b"deep inside" + b"</div>" * 5000 + b"</body></html>"
LARGE_PAGE = (
    b"<html><head><title>Large</title></head><body>"
    + b"".join(b"<p>Row %d of many, <b>bold</b> <a href='/r/%d'>link</a></p>\n" % (n, n) for n in range(6000))
    + b"</body></html>"
)
assert len(LARGE_PAGE) > IN_THREAD_HTML


class Handler(BaseHTTPRequestHandler):
    """The routes the tests fetch (see :meth:`do_GET`); HTTP/1.0: one request per connection."""

    server: Server

    def log_message(self, format: str, *args: Any) -> None:  # stderr is not ours to fill
        pass

    def send(self, status: int, body: bytes, content_type: str | None, *, length: bool = True, **headers: str) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        if length:
            self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Host", "")))
        path = self.path
        if path == "/page":
            self.send(200, PAGE, "text/html; charset=utf-8")
        elif path == "/data.json":
            self.send(200, JSON_BODY, "application/json")
        elif path == "/plain.txt":
            self.send(200, "plain text, as it is: <b>not bold</b> é\n".encode(), "text/plain; charset=utf-8")
        elif path == "/long.txt":
            self.send(200, b"".join(b"%04d\n" % n for n in range(1000)), "text/plain")
        elif path == "/image.png":
            self.send(200, PNG, "image/png")
        elif path == "/big":
            self.send(200, b"a" * 20_000, "text/plain")
        elif path == "/big-unsaid":  # no Content-Length: the body ends when the connection does
            self.send(200, b"b" * 20_000, "text/plain", length=False)
        elif path == "/slow":  # the headers, then a body that never comes in time
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "10")
            self.end_headers()
            self.wfile.flush()
            time.sleep(5)
        elif path.startswith("/hop/"):  # /hop/3 -> /hop/2 -> /hop/1 -> /hop/0 -> /plain.txt
            left = int(path.rsplit("/", 1)[1])
            self.send(302, b"", None, Location=f"/hop/{left - 1}" if left else "/plain.txt")
        elif path == "/to-metadata":
            self.send(302, b"", None, Location="http://169.254.169.254/latest/meta-data/")
        elif path == "/to-file":
            self.send(301, b"", None, Location="file:///etc/passwd")
        elif path == "/to-localhost":  # another name for the same machine: another host, all the same
            self.send(302, b"", None, Location=f"http://localhost:{self.server.server_address[1]}/plain.txt")
        elif path == "/to-same-name":  # the same host name again: a new connection, resolved again
            self.send(302, b"", None, Location="/plain.txt")
        elif path == "/host":
            self.send(200, self.headers.get("Host", "").encode(), "text/plain")
        elif path == "/deep":  # nested deeper than a converter can recurse
            self.send(200, DEEP, "text/html")
        elif path == "/large-page":  # over what is converted in a thread: a child process does it
            self.send(200, LARGE_PAGE, "text/html")
        elif path == "/missing":
            self.send(404, b"no such page", "text/plain")
        else:
            self.send(500, b"unknown route", "text/plain")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a stalled handler must not hold the test's end

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[tuple[str, str]] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    try:
        yield running
    finally:
        running.shutdown()
        running.server_close()


class Names:
    """A resolver whose answers the test writes: each name's answers in turn, the last one repeated (a name
    that answers a public address, then a private one, is a rebinding attack)."""

    def __init__(self, **answers: Sequence[Sequence[str]]) -> None:
        self.answers = {name.replace("_", "-") + ".test": list(each) for name, each in answers.items()}
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        answers = self.answers.get(host)
        if not answers:
            raise AssertionError(f"the test did not expect {host} to be looked up")
        return list(answers.pop(0) if len(answers) > 1 else answers[0])


async def fetch(tool: Fetch, tmp_path: Path, **args: Any) -> str:
    """The tool's output for ``args`` (prepared, run, and checked on the wire as the runner sends it)."""
    result = await call(tool, make_ctx(str(tmp_path)), **args)
    assert result.locations is None
    return result.output


# -- what it reads ------------------------------------------------------------------------------------


async def test_html_becomes_markdown_with_its_title_and_without_the_noise(server: Server, tmp_path: Path) -> None:
    output = await fetch(Fetch(allow=LOCAL), tmp_path, url=server.url("/page"))
    assert f"URL: {server.url('/page')}" in output
    assert "content type: text/html; converted to Markdown" in output
    assert "Title: The Test Page" in output
    assert "# Welcome" in output
    assert "Some **bold** words" in output
    assert f"[a link]({server.url('/docs/a.html')})" in output  # made absolute: the model can fetch it
    assert "- first\n- second" in output
    assert "x = 1" in output
    for noise in ("in a script", "color: red", "Menu one", "Copyright", "About"):
        assert noise not in output


async def test_a_page_nested_too_deep_for_markdown_comes_as_its_text(server: Server, tmp_path: Path) -> None:
    output = await fetch(Fetch(allow=LOCAL), tmp_path, url=server.url("/deep"))
    assert "deep inside" in output


async def test_a_large_page_is_converted_in_a_child_process_within_its_limit(server: Server, tmp_path: Path) -> None:
    """A page over what is converted in a thread (many seconds of CPU, for a hostile one) is converted in a
    child process, which its time limit stops (the fetch fails saying why) and which no session waits on."""
    output = await fetch(Fetch(allow=LOCAL), tmp_path, url=server.url("/large-page"))
    assert "# Large" in output
    assert "Row 1 of many, **bold** [link](" in output
    started = time.monotonic()
    quick = Fetch(allow=LOCAL, limits=dataclasses.replace(FetchLimits(), convert_seconds=0.05))
    with pytest.raises(ToolError, match=r"of HTML, and turning it into text took longer than 0.05 s: it was stopped"):
        await fetch(quick, tmp_path, url=server.url("/large-page"))
    assert time.monotonic() - started < 5


async def test_json_and_text_come_as_they_are(server: Server, tmp_path: Path) -> None:
    tool = Fetch(allow=LOCAL)
    output = await fetch(tool, tmp_path, url=server.url("/data.json"))
    assert "content type: application/json\n" in output
    assert json.loads(output.split("\n\n", 1)[1]) == json.loads(JSON_BODY)
    output = await fetch(tool, tmp_path, url=server.url("/plain.txt"))
    assert output.endswith("\n\nplain text, as it is: <b>not bold</b> é\n")


async def test_a_long_text_is_cut_and_read_on_from_an_offset(server: Server, tmp_path: Path) -> None:
    tool = Fetch(allow=LOCAL)
    first = await fetch(tool, tmp_path, url=server.url("/long.txt"), max_chars=100)
    assert "0000\n0001\n" in first
    assert "0020" not in first
    assert first.endswith("[Cut: characters 0 to 100 of 5,000. To read on, fetch again with offset=100.]")
    second = await fetch(tool, tmp_path, url=server.url("/long.txt"), max_chars=100, offset=100)
    assert "\n\n0020\n0021\n" in second
    last = await fetch(tool, tmp_path, url=server.url("/long.txt"), offset=4990)
    assert last.endswith("0998\n0999\n\n\n[Characters 4,990 to 5,000 of 5,000: the end.]")


async def test_an_image_is_refused_with_its_type_and_size(server: Server, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"image/png \(208 bytes\), not a web page or text"):
        await fetch(Fetch(allow=LOCAL), tmp_path, url=server.url("/image.png"))


async def test_an_error_status_is_read_and_marked_failed(server: Server, tmp_path: Path) -> None:
    result = await call(Fetch(allow=LOCAL), make_ctx(str(tmp_path)), url=server.url("/missing"))
    assert result.failed
    assert "Status: 404" in result.output
    assert "no such page" in result.output


# -- limits -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/big", "/big-unsaid"])
async def test_too_large_is_refused(server: Server, tmp_path: Path, path: str) -> None:
    with pytest.raises(ToolError, match=r"fetch's limit of 10 KB"):
        await fetch(Fetch(allow=LOCAL, limits=QUICK), tmp_path, url=server.url(path))


async def test_a_server_that_stalls_is_given_up_on_in_time(server: Server, tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"did not answer in full within 1 s|timed out"):
        await fetch(Fetch(allow=LOCAL, limits=QUICK), tmp_path, url=server.url("/slow"))
    assert time.monotonic() - started < 4  # the server sleeps 5 s


async def test_redirects_within_the_limit_are_followed(server: Server, tmp_path: Path) -> None:
    output = await fetch(Fetch(allow=LOCAL, limits=QUICK), tmp_path, url=server.url("/hop/2"))
    assert f"URL: {server.url('/plain.txt')}\nRedirected from: {server.url('/hop/2')}" in output
    assert "plain text, as it is" in output


async def test_too_many_redirects_stop(server: Server, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"redirects more than 3 times"):
        await fetch(Fetch(allow=LOCAL, limits=QUICK), tmp_path, url=server.url("/hop/3"))


async def test_a_redirect_to_a_private_address_or_another_scheme_is_refused(server: Server, tmp_path: Path) -> None:
    tool = Fetch(allow=LOCAL)
    with pytest.raises(
        ToolError,
        match=r"Refused: a redirect to http://169\.254\.169\.254/latest/meta-data/: 169\.254\.169\.254 is a link-local",
    ):
        await fetch(tool, tmp_path, url=server.url("/to-metadata"))
    with pytest.raises(ToolError, match=r"A redirect to file:/+etc/passwd has file:; fetch reads http and https"):
        await fetch(tool, tmp_path, url=server.url("/to-file"))


async def test_a_redirect_to_another_host_stops_there_so_the_user_is_asked_about_it(
    server: Server, tmp_path: Path
) -> None:
    tool = Fetch(allow=[*LOCAL, "localhost"])
    with pytest.raises(ToolError, match=r"redirects to another host: http://localhost:\d+/plain\.txt\. Fetch that URL"):
        await fetch(tool, tmp_path, url=server.url("/to-localhost"))


# -- addresses ----------------------------------------------------------------------------------------

REFUSED = {
    "http://127.0.0.1/": "loopback",
    "http://127.8.9.10:8080/": "loopback",
    "http://[::1]/": "loopback",
    "http://10.1.2.3/": "private",
    "http://172.16.0.1/": "private",
    "http://192.168.1.1/": "private",
    "http://[fd12:3456::1]/": "private",  # unique local
    "http://169.254.169.254/latest/meta-data/": "link-local",
    "http://[fe80::1]/": "link-local",
    "http://[fe80::1%25eth0]/": "link-local",
    "http://100.64.0.1/": "carrier-grade NAT",
    "http://224.0.0.1/": "multicast",
    "http://[ff02::1]/": "multicast",
    "http://0.0.0.0/": "unspecified",
    "http://[::]/": "unspecified",
    "http://240.0.0.1/": "reserved|private",
    "http://[::ffff:127.0.0.1]/": r"loopback \(IPv4 127\.0\.0\.1 inside IPv6\)",
    "http://[::ffff:a9fe:a9fe]/": r"link-local .*inside IPv6",
    "http://[64:ff9b::7f00:1]/": "loopback",  # NAT64
    "http://2130706433/": "written as a number",
    "http://0x7f000001/": "written as a number",
    "http://0177.0.0.1/": "written as a number",
    "http://127.1/": "written as a number",
}


@pytest.mark.parametrize(("url", "why"), list(REFUSED.items()))
async def test_this_machine_and_its_networks_are_refused_before_asking(url: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=why):
        await Fetch().prepare({"url": url}, make_ctx(str(tmp_path)))


def test_public_addresses_pass_the_rules() -> None:
    for text_address in ("93.184.215.14", "8.8.8.8", "2606:4700::6810:85e5", "::ffff:8.8.8.8"):
        assert forbidden(ipaddress.ip_address(text_address)) is None
    for name in ("8.8.8.8", "example.com", "123.com", "0x.example"):
        assert not numeric_ipv4(name)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "example.com"])
async def test_other_schemes_are_refused(url: str, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"fetch reads http and https URLs only"):
        await Fetch().prepare({"url": url}, make_ctx(str(tmp_path)))


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://docs.example.com@evil.example/", "holds a user name or password"),
        ("https://user:secret@example.com/", "holds a user name or password"),
        ("https://example.com/a b", "holds spaces, backslashes or control characters"),
        ("https://example.com\\@evil.example/", "holds spaces, backslashes or control characters"),
        ("https:///path", "has no host"),
        ("https://example.com:99999/", "is not valid"),
    ],
)
async def test_urls_that_could_mislead_are_refused(url: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=why):
        await Fetch().prepare({"url": url}, make_ctx(str(tmp_path)))


async def test_the_question_names_the_host_even_when_the_url_is_long(tmp_path: Path) -> None:
    host = "a" * 60 + "." + "b" * 60 + ".example"
    plan = await Fetch().prepare({"url": f"https://{host}/page"}, make_ctx(str(tmp_path)))
    assert plan.title.startswith("Fetch https://aaaa")
    assert plan.title.endswith(f"(from {host[:79]}…)")
    assert (plan.permission_key, plan.network, plan.mutating) == (f"fetch:{host}", True, False)


async def test_a_name_that_resolves_to_nothing_says_so(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"Could not fetch http://nowhere\.test/: nowhere\.test resolves to no address"):
        await fetch(Fetch(resolver=Names(nowhere=[[]])), tmp_path, url="http://nowhere.test/")


async def test_a_name_resolving_to_a_private_address_is_refused(server: Server, tmp_path: Path) -> None:
    names = Names(inside=[["10.0.0.7"]], mixed=[["127.0.0.1", "192.168.0.9"]])
    tool = Fetch(allow=LOCAL, resolver=names)
    with pytest.raises(ToolError, match=r"inside\.test resolves to 10\.0\.0\.7, which is a private address"):
        await fetch(tool, tmp_path, url=server.url("/plain.txt", "inside.test"))
    # one forbidden address among allowed ones is enough: the system could connect to any of them
    with pytest.raises(ToolError, match=r"mixed\.test resolves to 192\.168\.0\.9"):
        await fetch(tool, tmp_path, url=server.url("/plain.txt", "mixed.test"))
    assert server.seen == []


async def test_the_connection_goes_to_the_address_checked_with_the_name_kept(server: Server, tmp_path: Path) -> None:
    """Rebinding: the name answers an allowed address, then a private one. The first connection goes to the
    address checked (the Host header keeps the name); the redirect's new connection resolves again, gets the
    private address, and is refused: nothing reaches it."""
    names = Names(rebind=[["127.0.0.1"], ["10.9.8.7"]])
    tool = Fetch(allow=LOCAL, resolver=names)
    output = await fetch(tool, tmp_path, url=server.url("/host", "rebind.test"))
    assert output.endswith(f"\n\nrebind.test:{server.port}")
    assert names.asked == ["rebind.test"]  # resolved once, for the connection it made
    with pytest.raises(ToolError, match=r"rebind\.test resolves to 10\.9\.8\.7, which is a private address"):
        await fetch(tool, tmp_path, url=server.url("/to-same-name", "rebind.test"))
    assert [path for path, _ in server.seen] == ["/host"]


async def test_an_allowed_name_reaches_its_private_address(server: Server, tmp_path: Path) -> None:
    """The user's config can allow a host by name, whatever it resolves to; others keep the rules."""
    names = Names(wiki=[["127.0.0.1"]], other=[["127.0.0.1"]])
    tool = Fetch(allow=["wiki.test"], resolver=names)
    assert "plain text" in await fetch(tool, tmp_path, url=server.url("/plain.txt", "wiki.test"))
    with pytest.raises(ToolError, match=r"other\.test resolves to 127\.0\.0\.1, which is a loopback address"):
        await fetch(tool, tmp_path, url=server.url("/plain.txt", "other.test"))


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``secure.test`` and its key (made with ``openssl``)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl to make a certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=secure.test"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return cert, key


async def test_tls_keeps_the_name_and_verifies_the_certificate(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    """Connected to the address checked, TLS still speaks to the name: the server is told ``secure.test``
    (SNI), not the address; and the certificate is verified (one no one trusts is refused)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    told: list[str | None] = []
    context.sni_callback = lambda _socket, name, _context: told.append(name)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)

    def serve() -> None:
        with contextlib.suppress(OSError):  # the client gives up during the handshake
            connection, _ = listener.accept()
            with connection:
                context.wrap_socket(connection, server_side=True).close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        tool = Fetch(allow=LOCAL, resolver=Names(secure=[["127.0.0.1"]]))
        with pytest.raises(ToolError, match=r"Could not fetch .*TLS certificate could not be verified"):
            await fetch(tool, tmp_path, url=f"https://secure.test:{port}/")
    finally:
        thread.join(5)
        listener.close()
    assert told == ["secure.test"]


# -- on the wire --------------------------------------------------------------------------------------


def model_call(**args: Any) -> ToolCallRequest:
    return ToolCallRequest(id="model_fetch", name="fetch", arguments=json.dumps(args))


def settings(tool: Fetch, *responses: Any) -> Settings:
    model = ScriptedModel(list(responses))
    return Settings(make_model=lambda profile: model, make_sandbox=OwnSandboxes(bare_sandbox), tools=lambda: [tool])


def names_for(*hosts: str) -> Names:
    return Names(**{host.removesuffix(".test").replace("-", "_"): [["127.0.0.1"]] for host in hosts})


async def test_the_call_on_the_wire_and_always_allow_for_one_host(server: Server, check: Any) -> None:
    client = FakeClient(permission=select("allow_always"))
    tool = Fetch(allow=LOCAL, resolver=names_for("one.test", "two.test"))
    responses = [
        [model_call(url=server.url("/page", "one.test"))],
        [model_call(url=server.url("/plain.txt", "one.test"))],
        [model_call(url=server.url("/plain.txt", "two.test"))],
        text("done"),
    ]
    async with connect(settings(tool, *responses), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        assert await editor.prompt(sid, "read them") == {"stopReason": "end_turn"}
        updates = [u for u in editor.updates(sid) if "toolCallId" in u]
    asked = client.permission_requests
    assert [r["toolCall"]["title"] for r in asked] == [
        f"Fetch {server.url('/page', 'one.test')}",
        f"Fetch {server.url('/plain.txt', 'two.test')}",  # one host's "always" does not cover another
    ]
    assert [r["toolCall"]["kind"] for r in asked] == ["fetch", "fetch"]
    assert "Always allow fetching from one.test" in [o["name"] for o in asked[0]["options"]]
    announced = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    assert (announced[0]["kind"], announced[0]["title"]) == ("fetch", f"Fetch {server.url('/page', 'one.test')}")
    done = [u for u in updates if u.get("status") == "completed"]
    assert len(done) == 3
    assert done[0]["content"][0]["content"]["text"].startswith("# Welcome")
    assert all(not u.get("locations") for u in updates)


async def test_read_only_mode_asks_and_a_rejection_is_kept(server: Server, check: Any) -> None:
    client = FakeClient(permission=allow_once)
    responses = [[model_call(url=server.url("/plain.txt"))], text("ok")]
    async with connect(settings(Fetch(allow=LOCAL), *responses), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "read-only"})
        await editor.prompt(sid, "go")
        done = [u for u in editor.updates(sid) if u.get("status") == "completed"]
    assert len(client.permission_requests) == 1
    assert "plain text, as it is" in done[0]["content"][0]["content"]["text"]

    client = FakeClient(permission=select("reject_once"))
    responses = [[model_call(url=server.url("/plain.txt"))], text("ok")]
    async with connect(settings(Fetch(allow=LOCAL), *responses), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        await editor.prompt(sid, "go")
    assert len(client.permission_requests) == 1
    assert server.seen == [("/plain.txt", f"127.0.0.1:{server.port}")]  # the rejected call reached nothing


def test_importing_the_tool_does_not_import_the_http_client() -> None:
    import subprocess  # here: one test runs a fresh interpreter
    import sys

    modules = ("httpx2", "httpcore2", "bs4", "markdownify")
    code = f"import sys, refagent.tools.fetch; print(sorted(m for m in {modules!r} if m in sys.modules))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert found.strip() == "[]"
