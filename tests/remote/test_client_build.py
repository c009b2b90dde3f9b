"""The client's requests are built as ``httpx.AsyncClient.build_request`` builds them.

``HttpTransport.build`` makes the ``httpx.Request`` itself from a URL kept per path (the
producer's create in the pickup latency, docs/benchmarks.md): what goes on the wire must stay
byte for byte what the client's own ``build_request`` made, whatever the credentials, key,
body, long-poll timeout, query or base path.
"""

from __future__ import annotations

import httpx
import pytest

from tracker_client.errors import ValidationFailed
from tracker_client.nulltickets.options import ClientOptions
from tracker_client.nulltickets.transport import URLS_KEPT, Credentials, HttpTransport

pytestmark = pytest.mark.timeout(30)

BODY = b'{"pipeline_id":"p1","title":"one"}'


def _stock(
    transport: HttpTransport,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    read_timeout_s: float | None = None,
) -> httpx.Request:
    """The request the client's own ``build_request`` makes of the same call."""
    client = transport._pooled or transport._client
    timeout = transport.timeout
    if read_timeout_s is not None:
        timeout = httpx.Timeout(
            read_timeout_s,
            connect=timeout.connect,
            write=timeout.write,
            pool=timeout.pool,
        )
    return client.build_request(method, path, content=body, headers=headers, timeout=timeout)


def _same(built: httpx.Request, stock: httpx.Request) -> None:
    assert built.method == stock.method
    assert built.url == stock.url
    assert built.url.raw_path == stock.url.raw_path
    assert built.headers.raw == stock.headers.raw
    assert built.content == stock.content
    assert built.extensions == stock.extensions


@pytest.mark.parametrize("keep_alive", [False, True])
@pytest.mark.parametrize(
    ("auth", "token", "expected"),
    [
        ("admin", "sekrit", {"Authorization": "Bearer sekrit"}),
        ("admin", None, {}),
        ("public", "sekrit", {}),
        ("any_bearer", None, {"Authorization": "Bearer -"}),
        ("any_bearer", "sekrit", {"Authorization": "Bearer sekrit"}),
    ],
)
def test_requests_match_the_clients_own_build(
    keep_alive: bool, auth: Credentials, token: str | None, expected: dict[str, str]
) -> None:
    transport = HttpTransport(ClientOptions(url="http://127.0.0.1:9", api_token=token))
    transport.use_keep_alive(keep_alive)
    for _ in range(2):  # the first builds the URL, the second reuses it
        built = transport.build("POST", "/tasks", body=BODY, auth=auth, idempotency_key="k-1")
        headers = {**expected, "Idempotency-Key": "k-1", "Content-Type": "application/json"}
        _same(built, _stock(transport, "POST", "/tasks", BODY, headers))
        bare = transport.build("GET", "/health", body=None, auth=auth)
        _same(bare, _stock(transport, "GET", "/health", None, expected))


def test_a_lease_route_carries_the_lease_token_instead() -> None:
    transport = HttpTransport(ClientOptions(url="http://127.0.0.1:9", api_token="admin-token"))
    path = "/leases/l-1/heartbeat"
    built = transport.build("POST", path, body=b"{}", auth="lease", lease_token="lease-token")
    headers = {"Authorization": "Bearer lease-token", "Content-Type": "application/json"}
    _same(built, _stock(transport, "POST", path, b"{}", headers))
    with pytest.raises(ValidationFailed, match="lease token"):
        transport.build("POST", path, body=None, auth="lease", lease_token=None)


def test_a_long_poll_keeps_the_other_timeouts() -> None:
    transport = HttpTransport(ClientOptions(url="http://127.0.0.1:9"))
    transport.use_keep_alive(True)
    built = transport.build(
        "POST", "/leases/claim-parked", body=BODY, auth="admin", read_timeout_s=42.5
    )
    stock = _stock(
        transport,
        "POST",
        "/leases/claim-parked",
        BODY,
        {"Content-Type": "application/json"},
        read_timeout_s=42.5,
    )
    _same(built, stock)
    assert built.extensions["timeout"]["read"] == 42.5


def test_queries_and_a_base_path_merge_as_httpx_merges_them() -> None:
    transport = HttpTransport(ClientOptions(url="http://127.0.0.1:9/rail/v1"))
    for path in ("/tasks?stage=todo&limit=5", "/tasks/t%2F1", "/tasks?cursor=a%20b", "/tasks"):
        _same(
            transport.build("GET", path, body=None, auth="admin"),
            _stock(transport, "GET", path, None, {}),
        )
    assert str(transport.build("GET", "/tasks", body=None, auth="admin").url) == (
        "http://127.0.0.1:9/rail/v1/tasks"
    )


def test_kept_urls_are_bounded_and_queries_are_not_kept() -> None:
    transport = HttpTransport(ClientOptions(url="http://127.0.0.1:9"))
    for i in range(URLS_KEPT + 50):
        transport.build("GET", f"/tasks/t{i}", body=None, auth="admin")
        transport.build("GET", f"/tasks?cursor=c{i}", body=None, auth="admin")
    kept = transport._urls
    assert len(kept) == URLS_KEPT
    assert "/tasks/t0" not in kept  # the oldest went first
    assert f"/tasks/t{URLS_KEPT + 49}" in kept
    assert not any("?" in path for path in kept)


def test_the_size_guard_counts_what_goes_on_the_wire() -> None:
    transport = HttpTransport(ClientOptions(url="http://127.0.0.1:9", max_request_bytes=300))
    request = transport.build("POST", "/tasks", body=b"x" * 10, auth="admin")
    wire = (
        f"POST {request.url.raw_path.decode()} HTTP/1.1\r\n".encode()
        + b"".join(k + b": " + v + b"\r\n" for k, v in request.headers.raw)
        + b"\r\n"
        + request.content
    )
    room = 300 - len(wire)
    transport.build("POST", "/tasks", body=b"x" * (10 + room), auth="admin")  # exactly at it
    with pytest.raises(ValidationFailed, match="over the 300-byte limit") as refused:
        transport.build("POST", "/tasks", body=b"x" * (11 + room), auth="admin")
    assert refused.value.code == "request_too_large"
