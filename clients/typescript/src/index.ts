// The generated client of memory-service: every message and gRPC service client of memory.v1
// (ts-proto over @grpc/grpc-js), plus `callMetadata` for the bearer token. `credentials`, `Metadata`,
// `status` and the `ServiceError` type of @grpc/grpc-js are re-exported, so a project needs no import of
// its own from @grpc/grpc-js (and gets the version the generated clients were built against).
import { Metadata } from "@grpc/grpc-js";

export { credentials, Metadata, status } from "@grpc/grpc-js";
export type { ServiceError } from "@grpc/grpc-js";

export * from "./gen/memory/v1/knowledge";
export * as audit from "./gen/memory/v1/audit_service";
export * as changeFeed from "./gen/memory/v1/change_feed_service";
export * as context from "./gen/memory/v1/context_service";
export * as documents from "./gen/memory/v1/document_service";
export * as domainPacks from "./gen/memory/v1/domain_pack_service";
export * as factQuery from "./gen/memory/v1/fact_query_service";
export * as facts from "./gen/memory/v1/fact_service";
export * as observationQuery from "./gen/memory/v1/observation_query_service";
export * as observations from "./gen/memory/v1/observation_service";
export * as retrieval from "./gen/memory/v1/retrieval_service";
export * as snapshots from "./gen/memory/v1/snapshot_service";
export * as sources from "./gen/memory/v1/source_service";
export * as traces from "./gen/memory/v1/trace_service";
export * as webhooks from "./gen/memory/v1/webhook_service";

/** Metadata carrying `authorization: Bearer <token>` (none when the token is empty). */
export function callMetadata(token: string): Metadata {
  const metadata = new Metadata();
  if (token) {
    metadata.set("authorization", `Bearer ${token}`);
  }
  return metadata;
}
