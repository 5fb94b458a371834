"""Schemathesis hooks for tests/http.rs: how to send application/x-ndjson
(the body of /v1/check and /v1/query), which schemathesis has no
serializer of its own for. A generated string goes as it is; any other
value as one JSON line."""

import json

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return (json.dumps(value) + "\n").encode()
