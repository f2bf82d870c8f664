// A fake firn node for the unit tests: grpc-js serving IDService and
// Health from the client's own protos, each call answered by a handler
// the test sets.
import * as grpc from "@grpc/grpc-js";
import { protos } from "../proto";

export type Handler = (req: any) => Promise<any> | any;

/** A gRPC error with the firn details a node sends. */
export function firnError(code: number, message: string, reason?: string, retryMs?: number, metadata?: Record<string, string>): grpc.ServiceError {
  const p = protos();
  const details: any[] = [];
  if (reason) {
    details.push({
      type_url: "type.googleapis.com/google.rpc.ErrorInfo",
      value: p.errorInfo.encode(p.errorInfo.fromObject({ reason, domain: "firn.v1.IDService", metadata: metadata ?? {} })).finish(),
    });
  }
  if (retryMs !== undefined) {
    details.push({
      type_url: "type.googleapis.com/google.rpc.RetryInfo",
      value: p.retryInfo.encode(p.retryInfo.fromObject({ retry_delay: { seconds: Math.floor(retryMs / 1000), nanos: (retryMs % 1000) * 1e6 } })).finish(),
    });
  }
  const md = new grpc.Metadata();
  md.set("grpc-status-details-bin", Buffer.from(p.status.encode(p.status.fromObject({ code, message, details })).finish()));
  const e = new Error(message) as grpc.ServiceError;
  e.code = code;
  e.details = message;
  e.metadata = md;
  return e;
}

export class FakeNode {
  server = new grpc.Server();
  addr = "";
  /** The next ID NextRange hands out (above 2^53 by default). */
  next = (1n << 53n) + 1000n;
  handlers: Record<string, Handler> = {};
  calls: Record<string, number> = {};
  health: string = "SERVING";
  /** How long the ID calls (NextRange, NextIDs, NextID) hold their answer back (ms). */
  delayMs = 0;
  generators: any[] = [{ name: "default", is_default: true, max_batch: 100000, max_range: "1000000", kind: "snowflake" }];

  constructor() {
    const p = protos();
    const idCalls = new Set(["NextRange", "NextIDs", "NextID"]);
    const unary = (name: string, dflt: Handler) => (call: any, cb: grpc.sendUnaryData<any>) => {
      this.calls[name] = (this.calls[name] ?? 0) + 1;
      const h = this.handlers[name] ?? dflt;
      const delay = idCalls.has(name) ? this.delayMs : 0;
      (delay > 0 ? new Promise<void>((r) => setTimeout(r, delay).unref()) : Promise.resolve())
        .then(() => h(call.request))
        .then((resp) => {
          if (resp !== undefined) cb(null, resp);
        }, (err) => cb(err));
    };
    this.server.addService((p.IDService as any).service, {
      NextRange: unary("NextRange", (req) => {
        const n = BigInt(req.count);
        const first = this.next;
        this.next += n;
        return { runs: [{ first: first.toString(), count: n.toString() }] };
      }),
      NextIDs: unary("NextIDs", (req) => {
        const ids: string[] = [];
        for (let i = 0; i < req.count; i++) ids.push((this.next++).toString());
        return { ids };
      }),
      NextID: unary("NextID", () => ({ id: (this.next++).toString() })),
      Info: unary("Info", () => ({ node_name: "fake", generators: this.generators })),
      Decode: unary("Decode", () => ({})),
      NextSeq: unary("NextSeq", () => ({ first: "1", count: 1 })),
      NextSeqs: unary("NextSeqs", () => ({ results: [] })),
      CurrentSeq: unary("CurrentSeq", () => ({ value: "0" })),
    });
    this.server.addService((p.Health as any).service, {
      Check: (_call: any, cb: grpc.sendUnaryData<any>) => cb(null, { status: this.health }),
      Watch: (call: any) => {
        call.write({ status: this.health });
      },
    });
  }

  async start(): Promise<string> {
    const port = await new Promise<number>((res, rej) =>
      this.server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))),
    );
    this.addr = `127.0.0.1:${port}`;
    return this.addr;
  }

  stop(): void {
    this.server.forceShutdown();
  }
}
