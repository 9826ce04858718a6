"""An OTLP traces request body to an `ExportTraceServiceRequest`, at a bounded cost whatever is
sent.

A protobuf body is measured on the wire before it is parsed: a 4 MiB message of 2M empty spans would
otherwise become 2M span objects (75 -> 422 MB of RSS). Each sub-message costs an object, so their
number is bounded (MAX_ITEMS, spans among them MAX_SPANS) before a byte is parsed, and so is the
number of fields the measuring reads (MAX_FIELDS: 2M scalar fields would cost it a second of CPU).
The OTLP JSON form is bounded the same way by its containers and separators (counted in C,
`bytes.count`), which also bounds the pure-Python cost of protobuf's JSON mapping (13 s of CPU for 4
MiB unbounded). Over a bound, the request is refused whole (413, RESOURCE_EXHAUSTED over gRPC: not
worth retrying as it is); vLLM's batches (512 spans by default, a few dozen items each) are far
inside.
"""

from __future__ import annotations

import base64
import contextlib
import json
import zlib

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_SPANS = 8192                 # spans in one request (vLLM's exporter sends at most 512)
# sub-messages in one protobuf request: spans, attributes, values, events ...
MAX_ITEMS = 65536
# fields read on the wire before parsing: ~0.7 us each, the GIL held (a vLLM batch of 512 spans with
# 14 attributes is ~34,000)
MAX_FIELDS = 131072
# JSON containers and separators in one request (each a Python object at least)
MAX_JSON_ITEMS = 65536

_SPAN = "opentelemetry.proto.trace.v1.Span"


class RequestRejected(Exception):
    """A request answered with an error status and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def content_kind(content_type: str | None) -> str:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    if media == JSON:
        return JSON
    raise RequestRejected(415, f"unsupported Content-Type {content_type!r} ({PROTOBUF} or {JSON})")


def inflate(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """The body as sent (identity) or gunzipped, never past `max_bytes` inflated."""
    coding = (encoding or "identity").strip().lower()
    if coding == "identity":
        return body
    if coding not in ("gzip", "x-gzip"):
        raise RequestRejected(415, f"unsupported Content-Encoding {encoding!r} (gzip or none)")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, max_bytes + 1)
        if len(out) > max_bytes:
            raise RequestRejected(413, f"decompressed body exceeds {max_bytes} bytes")
        if not inflater.eof:
            raise RequestRejected(400, "truncated gzip body")
    except zlib.error as e:
        raise RequestRejected(400, f"bad gzip body: {e}") from None
    return out


def parse(payload: bytes, kind: str) -> trace_service_pb2.ExportTraceServiceRequest:
    request = trace_service_pb2.ExportTraceServiceRequest()
    if kind == PROTOBUF:
        _check_protobuf_size(payload)
        try:
            request.ParseFromString(payload)
        except (DecodeError, ValueError, RuntimeError) as e:
            raise RequestRejected(400, f"body is not an OTLP ExportTraceServiceRequest: {one_line(e)}") from None
        return request
    items = payload.count(b"{") + payload.count(b"[") + payload.count(b",")
    if items > MAX_JSON_ITEMS:
        raise RequestRejected(413, f"JSON body of {items} objects, arrays and elements exceeds {MAX_JSON_ITEMS}: "
                                   "send smaller batches")
    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError) as e:
        raise RequestRejected(400, f"body is not JSON: {one_line(e)}") from None
    if not isinstance(doc, dict):
        raise RequestRejected(400,
                              "body is not an OTLP ExportTraceServiceRequest: not a JSON object")
    try:
        _hex_ids_to_base64(doc)
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError) as e:
        raise RequestRejected(400, f"body is not an OTLP ExportTraceServiceRequest: {one_line(e)}") from None
    return request


def _check_protobuf_size(payload: bytes) -> None:
    fields, items, spans = count_submessages(payload,
                                             trace_service_pb2.ExportTraceServiceRequest.DESCRIPTOR)
    if fields > MAX_FIELDS:
        raise RequestRejected(413,
                              f"more than {MAX_FIELDS} fields in one request: send smaller batches")
    if spans > MAX_SPANS:
        raise RequestRejected(413,
                              f"more than {MAX_SPANS} spans in one request: send smaller batches")
    if items > MAX_ITEMS:
        raise RequestRejected(413, f"more than {MAX_ITEMS} spans, attributes and values in one request: send "
                                   "smaller batches")


def count_submessages(buf: bytes, descriptor) -> tuple[int, int, int]:
    """(fields, sub-messages, spans) in a serialized message of `descriptor`, read from the wire
    tags without building a thing; the counting stops once one passes its bound (MAX_FIELDS,
    MAX_ITEMS, MAX_SPANS). A malformed wire is left to the parser that follows (it says what is
    wrong)."""
    fields = items = spans = 0
    stack: list[tuple[int, int, object]] = []
    pos, end, desc = 0, len(buf), descriptor
    message_fields: dict = {}
    while True:
        if pos >= end:
            if not stack:
                return fields, items, spans
            pos, end, desc = stack.pop()
            continue
        tag, pos = _varint(buf, pos)
        fields += 1
        if fields > MAX_FIELDS:
            return fields, items, spans
        wire = tag & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if size < 0 or pos + size > end:
                return fields, items, spans          # truncated: the parser refuses it
            sub = _message_field(message_fields, desc, tag >> 3)
            if sub is not None:
                items += 1
                if sub.full_name == _SPAN:
                    spans += 1
                if items > MAX_ITEMS or spans > MAX_SPANS:
                    return fields, items, spans
                stack.append((pos + size, end, desc))
                end, desc = pos + size, sub
                continue
            pos += size
        else:
            # groups and bad wire types: the parser refuses them
            return fields, items, spans


def _message_field(cache: dict, desc, number: int):
    key = (desc.full_name, number)
    if key not in cache:
        field = desc.fields_by_number.get(number)
        cache[key] = field.message_type if field is not None else None
    return cache[key]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            return -1, len(buf) + 1                  # truncated or overlong: ends the scan
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _hex_ids_to_base64(doc: dict) -> None:
    """OTLP/JSON writes trace and span ids in hex; protobuf's JSON mapping reads bytes as base64."""
    for rs in _items(doc, "resourceSpans", "resource_spans"):
        for ss in _items(rs, "scopeSpans", "scope_spans"):
            for span in _items(ss, "spans"):
                _convert_ids(span)
                for link in _items(span, "links"):
                    _convert_ids(link)


def _items(obj, *keys: str) -> list:
    if not isinstance(obj, dict):
        return []
    for key in keys:
        value = obj.get(key)
        if isinstance(value, list):
            return value
    return []


def _convert_ids(obj) -> None:
    if not isinstance(obj, dict):
        return
    for key in _ID_FIELDS:
        value = obj.get(key)
        if isinstance(value, str) and len(value) in (16, 32):
            # not hex: left to be read as base64 (protobuf's own mapping), which some exporters send
            with contextlib.suppress(ValueError):
                obj[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")


def one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:200] or type(e).__name__
