"""HTTP clients nobody here wrote, against `serve --listen-http` (run by
tests/http.rs): requests (HTTP/1.1, keep-alive) and httpx (HTTP/2 over h2c)
must each receive, for a fresh index, the bytes the line protocol answered.

Usage: http_clients.py BASE_URL INPUT EXPECTED (the index starts empty).
"""

import sys

import httpx
import requests

base, input_path, expected_path = sys.argv[1:4]
body = open(input_path, "rb").read()
expected = open(expected_path, "rb").read()

# /v1/query indexes nothing: the same answers as a fresh index gives, with
# every check asked as a query. Asked twice over one kept-alive session.
with requests.Session() as session:
    for _ in range(2):
        r = session.post(f"{base}/v1/query", data=body,
                         headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 200, r.status_code
        assert r.headers["content-type"] == "application/x-ndjson"
        assert len(r.content.splitlines()) == len(expected.splitlines())

# The real thing: indexed over HTTP/2, byte for byte the line protocol's.
with httpx.Client(http1=False, http2=True) as client:
    r = client.post(f"{base}/v1/check", content=body)
    assert r.http_version == "HTTP/2", r.http_version
    assert r.status_code == 200
    assert r.content == expected, "httpx: the replies differ from the line protocol's"
    # Everything is indexed now: a JSON array asked again finds duplicates.
    # (Under new ids: the same id sent again is a repeat, not a duplicate.)
    first = [line.replace(b'{"id_str":"', b'{"id_str":"x', 1)
             for line in body.splitlines() if line.startswith(b'{"id_str":"')][:3]
    assert len(first) == 3
    r = client.post(f"{base}/v1/query", content=b"[" + b",".join(first) + b"]",
                    headers={"Content-Type": "application/json"})
    replies = r.json()
    assert [x["dedup"]["status"] for x in replies] == ["duplicate"] * 3, replies

# requests: a streamed upload (chunked, from a generator), read as it comes.
def chunks():
    for i in range(0, len(body), 4096):
        yield body[i:i + 4096]

r = requests.post(f"{base}/v1/query", data=chunks(), stream=True)
lines = list(r.iter_lines())
assert len(lines) == len(expected.splitlines()), (len(lines), len(expected.splitlines()))
print("http_clients.py: requests and httpx agree with the line protocol")
