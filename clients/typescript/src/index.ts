// The generated client of memory-service: every message and gRPC service client of memory.v1
// (ts-proto over @grpc/grpc-js; every service of the protos, tests/e2e/test_generated_clients.py checks
// the list), plus `callMetadata` for the bearer token and the Timestamp text conversions. `credentials`, `Metadata`,
// `status` and the `ServiceError` type of @grpc/grpc-js are re-exported, so a project needs no import of
// its own from @grpc/grpc-js (and gets the version the generated clients were built against).
import { Metadata } from "@grpc/grpc-js";

export { credentials, Metadata, status } from "@grpc/grpc-js";
export type { ServiceError } from "@grpc/grpc-js";

export * from "./gen/memory/v1/knowledge";
export { Timestamp, timestampFromIso, timestampToIso } from "./timestamps";
export * as memoryRecords from "./gen/memory/v1/memory_record";
export * as memories from "./gen/memory/v1/memory_service";
export * as memoryQuery from "./gen/memory/v1/memory_query_service";
export * as namespaces from "./gen/memory/v1/namespace_service";
export * as vault from "./gen/memory/v1/vault_service";
export * as audit from "./gen/memory/v1/audit_service";
export * as changeFeed from "./gen/memory/v1/change_feed_service";
export * as context from "./gen/memory/v1/context_service";
export * as dataProtection from "./gen/memory/v1/data_protection_service";
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
