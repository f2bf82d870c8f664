// Loading the protos the client speaks: firn.v1 (a copy of the
// repository's proto, written by gen.sh), and the client's own
// grpc.health.v1 and google.rpc messages (proto/own).
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import * as protobuf from "protobufjs";

function protoRoot(): string {
  // dist/src → package root; dist/ when compiled flat.
  for (const p of [path.resolve(__dirname, "..", "proto"), path.resolve(__dirname, "..", "..", "proto")]) {
    try {
      require("node:fs").accessSync(path.join(p, "firn", "v1", "firn.proto"));
      return p;
    } catch {
      // try the next
    }
  }
  throw new Error("firn client: proto/firn/v1/firn.proto not found beside the package");
}

const loaderOptions: protoLoader.Options = {
  keepCase: true,
  longs: String, // 64-bit fields as decimal strings: BigInt() makes them exact
  enums: String,
  defaults: true,
  oneofs: true,
};

export interface Protos {
  IDService: grpc.ServiceClientConstructor;
  Health: grpc.ServiceClientConstructor;
  status: protobuf.Type;
  errorInfo: protobuf.Type;
  retryInfo: protobuf.Type;
}

let cached: Protos | undefined;

/** The service constructors and detail message types, loaded once. */
export function protos(): Protos {
  if (cached) return cached;
  const root = protoRoot();
  const def = protoLoader.loadSync(
    [path.join(root, "firn", "v1", "firn.proto"), path.join(root, "own", "health.proto")],
    { ...loaderOptions, includeDirs: [root] },
  );
  const pkg = grpc.loadPackageDefinition(def) as any;
  const rpc = new protobuf.Root();
  rpc.resolvePath = (origin: string, target: string) =>
    target.startsWith("google/protobuf/") || path.isAbsolute(target) ? target : path.resolve(path.dirname(origin), target);
  rpc.loadSync(path.join(root, "own", "rpc_status.proto"), { keepCase: true });
  rpc.resolveAll();
  cached = {
    IDService: pkg.firn.v1.IDService,
    Health: pkg.grpc.health.v1.Health,
    status: rpc.lookupType("google.rpc.Status"),
    errorInfo: rpc.lookupType("google.rpc.ErrorInfo"),
    retryInfo: rpc.lookupType("google.rpc.RetryInfo"),
  };
  return cached;
}
