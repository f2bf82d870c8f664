"""A fake firn node for the unit tests: an in-process gRPC server of
IDService whose answers a test scripts."""

import threading
from concurrent import futures

import grpc
from google.protobuf import any_pb2

from firn_client._proto import firn_client_rpc_pb2 as rpc
from firn_client._proto import firn_pb2 as pb
from firn_client._proto import firn_pb2_grpc as pb_grpc


def status_details(code, message, reason=None, retry=None, metadata=None):
    """The bytes of a google.rpc.Status with ErrorInfo (domain firn.v1.IDService) and
    RetryInfo, as a node sends them."""
    st = rpc.Status(code=code.value[0], message=message)
    if reason:
        info = rpc.ErrorInfo(reason=reason, domain="firn.v1.IDService", metadata=metadata or {})
        a = any_pb2.Any(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=info.SerializeToString())
        st.details.append(a)
    if retry is not None:
        ri = rpc.RetryInfo()
        ri.retry_delay.seconds = int(retry)
        ri.retry_delay.nanos = int(round((retry - int(retry)) * 1e9))
        a = any_pb2.Any(type_url="type.googleapis.com/google.rpc.RetryInfo", value=ri.SerializeToString())
        st.details.append(a)
    return st.SerializeToString()


class Refuse(Exception):
    def __init__(self, code, message, reason=None, retry=None, metadata=None):
        super().__init__(message)
        self.code, self.message, self.reason, self.retry, self.metadata = code, message, reason, retry, metadata


class FakeNode(pb_grpc.IDServiceServicer):
    """Issues IDs from a counter starting at start; hooks decide refusals.

    refuse: None, or a function (method name, request) -> Refuse or None.
    hang: an Event; while set, ID calls wait for it to clear (or their
    deadline).
    delay: seconds each ID call (NextIDs, NextRange) waits before it
    answers.
    range_unimplemented: answer NextRange UNIMPLEMENTED.
    """

    def __init__(self, start=1 << 60, run_len=0, host="127.0.0.1", port=0):
        self.lock = threading.Lock()
        self.next_id = start
        self.run_len = run_len  # >0: NextRange splits answers into runs this long, with gaps
        self.refuse = None
        self.hang = threading.Event()
        self.released = threading.Event()
        self.delay = 0.0
        self.range_unimplemented = False
        self.calls = {}
        self.seq = {}
        self.sections = 4
        self.owners = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        pb_grpc.add_IDServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("%s:%d" % (host, port))
        self.addr = "%s:%d" % (host, self.port)
        self.server.start()

    def stop(self):
        self.released.set()
        self.server.stop(0)

    def _enter(self, name, request, context):
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1
        if self.refuse is not None:
            r = self.refuse(name, request)
            if r is not None:
                context.set_trailing_metadata((("grpc-status-details-bin",
                                                status_details(r.code, r.message, r.reason, r.retry, r.metadata)),))
                context.abort(r.code, r.message)
        if self.hang.is_set() and name != "Info":
            while self.hang.is_set() and context.is_active() and not self.released.is_set():
                self.released.wait(0.01)
            if not context.is_active():
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "hung")
        if self.delay and name in ("NextIDs", "NextRange"):
            self.released.wait(self.delay)

    def _take(self, n):
        with self.lock:
            first = self.next_id
            self.next_id += n
        return first

    def NextIDs(self, request, context):
        self._enter("NextIDs", request, context)
        first = self._take(request.count)
        return pb.NextIDsResponse(ids=list(range(first, first + request.count)))

    def NextRange(self, request, context):
        self._enter("NextRange", request, context)
        if self.range_unimplemented:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no NextRange")
        n = request.count
        if not self.run_len:
            return pb.NextRangeResponse(runs=[pb.Run(first=self._take(n), count=n)])
        runs = []
        while n > 0:
            k = min(n, self.run_len)
            first = self._take(k + 7)  # a gap of 7 after each run
            runs.append(pb.Run(first=first, count=k))
            n -= k
        return pb.NextRangeResponse(runs=runs)

    def Info(self, request, context):
        self._enter("Info", request, context)
        g = pb.GeneratorInfo(name="default", is_default=True, max_batch=100000, max_range=1 << 20, serving=True)
        gens = [g]
        if self.owners:
            s = pb.GeneratorInfo(name="chats", kind="seq", sections=self.sections)
            for i, o in enumerate(self.owners):
                s.section_owners.append(pb.SectionOwner(section=i, address=o, serving=True))
            gens.append(s)
        return pb.InfoResponse(node_name="fake", generators=gens)

    def NextSeq(self, request, context):
        self._enter("NextSeq", request, context)
        with self.lock:
            v = self.seq.get(request.key, 0)
            self.seq[request.key] = v + request.count
        return pb.NextSeqResponse(first=v + 1, count=request.count)

    def CurrentSeq(self, request, context):
        self._enter("CurrentSeq", request, context)
        with self.lock:
            return pb.CurrentSeqResponse(value=self.seq.get(request.key, 0))
