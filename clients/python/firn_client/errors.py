"""Errors of the firn client: FirnError, and the decoding of a node's
refusal (google.rpc.Status in the grpc-status-details-bin trailer, with
ErrorInfo and RetryInfo details)."""

import grpc

from ._proto import firn_client_rpc_pb2 as _rpc
from ._proto import firn_pb2 as _firn

# The reasons a node gives: the names of firn.v1.ErrorReason.
NODE_REASONS = tuple(_firn.ErrorReason.keys())

# The client's own reasons.
CLOSED = "CLOSED"  # the client was closed
DEADLINE = "DEADLINE"  # the caller's deadline ran out
UNAVAILABLE = "UNAVAILABLE"  # every endpoint failed, none with a reason
INVALID_ARGUMENT = "INVALID_ARGUMENT"  # refused before any request
UNSPECIFIED = "ERROR_REASON_UNSPECIFIED"

_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = "google.rpc.ErrorInfo"
_RETRY_INFO = "google.rpc.RetryInfo"


# DOMAIN is the domain of the node's google.rpc.ErrorInfo: the service's
# name.
DOMAIN = "firn.v1.IDService"


class FirnError(Exception):
    """A failed client call.

    reason: the firn.v1.ErrorReason name the node gave (ErrorInfo, domain
        "firn.v1.IDService"), or the client's own: CLOSED, DEADLINE, UNAVAILABLE (every
        endpoint failed, none with a reason), INVALID_ARGUMENT (a bad count
        or key, refused before any request); ERROR_REASON_UNSPECIFIED when
        none applies. When a whole failover round failed, the last
        endpoint's reason.
    retry_after: seconds the node asked the client to wait (RetryInfo), or
        None.
    code: the grpc.StatusCode of the node's answer, or None when there was
        none (a client-side refusal, a deadline, close).
    metadata: the ErrorInfo metadata (dict), e.g. "owner" for WRONG_NODE.
    endpoint: the endpoint whose answer this is, when one answered.
    """

    def __init__(self, reason, message, code=None, retry_after=None, metadata=None, endpoint=None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.code = code
        self.retry_after = retry_after
        self.metadata = dict(metadata or {})
        self.endpoint = endpoint

    def __str__(self):
        s = "%s: %s" % (self.reason, self.message)
        if self.endpoint:
            s = "endpoint %s: %s" % (self.endpoint, s)
        if self.retry_after is not None:
            s += " (retry after %.3fs)" % self.retry_after
        return s

    def with_(self, **kw):
        """A copy with some fields replaced."""
        d = dict(reason=self.reason, message=self.message, code=self.code,
                 retry_after=self.retry_after, metadata=self.metadata, endpoint=self.endpoint)
        d.update(kw)
        return FirnError(**d)


def closed_error():
    return FirnError(CLOSED, "client closed")


def deadline_error(what="the caller's deadline ran out"):
    return FirnError(DEADLINE, what)


def invalid_argument(message):
    return FirnError(INVALID_ARGUMENT, message)


def decode_status_details(raw):
    """Reads a serialized google.rpc.Status: (reason or None, metadata,
    retry_after seconds or None). Reason is set only for an ErrorInfo of
    domain DOMAIN."""
    st = _rpc.Status()
    try:
        st.ParseFromString(raw)
    except Exception:  # a trailer we cannot read says nothing
        return None, {}, None
    reason, metadata, retry = None, {}, None
    for any_ in st.details:
        name = any_.type_url.rsplit("/", 1)[-1]
        if name == _ERROR_INFO:
            info = _rpc.ErrorInfo()
            try:
                info.ParseFromString(any_.value)
            except Exception:
                continue
            if info.domain == DOMAIN:
                reason = info.reason or None
                metadata = dict(info.metadata)
        elif name == _RETRY_INFO:
            ri = _rpc.RetryInfo()
            try:
                ri.ParseFromString(any_.value)
            except Exception:
                continue
            if ri.HasField("retry_delay"):
                retry = ri.retry_delay.seconds + ri.retry_delay.nanos / 1e9
    return reason, metadata, retry


def from_rpc_error(err, endpoint=None):
    """The FirnError of a failed gRPC call (a grpc.RpcError that is a
    grpc.Call)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    reason, metadata, retry = None, {}, None
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for k, v in trailers or ():
        if k == _DETAILS_KEY and isinstance(v, (bytes, bytearray)):
            reason, metadata, retry = decode_status_details(bytes(v))
    return FirnError(reason or UNSPECIFIED, details or (code.name if code else "error"),
                     code=code, retry_after=retry, metadata=metadata, endpoint=endpoint)


def rpc_like(code, message, endpoint=None):
    """A FirnError standing for a gRPC status the client made up (a
    cancelled attempt, an answer that breaks the API)."""
    return FirnError(UNSPECIFIED, message, code=code, endpoint=endpoint)
