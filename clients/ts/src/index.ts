export { FirnClient, MAX_NEXT_N, MAX_NEXT_RANGE, MAX_SEQ_COUNT, MAX_SEQ_KEY } from "./client";
export type { FirnClientOptions, TlsOptions, CallOptions, ClientStats } from "./client";
export { FirnError, codeName, decodeDetails } from "./errors";
export type { Reason } from "./errors";
export type { Run } from "./runs";
export { fnv1a64, sectionOf } from "./fnv";
