// A consumer of the packed @memory-service/client (make ts-package type-checks it with tsc --strict):
// a search with a bearer token, its typed answer, and a typed error code.
import { callMetadata, credentials, retrieval, ServiceError, status } from "@memory-service/client";

const client = new retrieval.RetrievalServiceClient(
  process.env.CB_QUERY_ADDR ?? "127.0.0.1:50052",
  credentials.createInsecure(),
);
const request = retrieval.SearchRequest.fromPartial({ namespace: "demo", query: "checkout runbook", topK: 3 });
client.search(request, callMetadata(process.env.CB_TOKEN ?? ""), (error: ServiceError | null, response: retrieval.SearchResponse) => {
  if (error) {
    const refused: boolean = error.code === status.UNAUTHENTICATED;
    console.error(refused ? "set CB_TOKEN" : error.message);
  } else {
    const keys: string[] = response.hits.map((hit) => hit.nodeKey);
    console.log(keys);
  }
  client.close();
});

// The types are real, not `any`: a wrong field type must not compile.
// @ts-expect-error topK is a number
retrieval.SearchRequest.fromPartial({ namespace: "demo", query: "x", topK: "3" });

// Every service is reachable through the package's one entry point, memories and the vault included;
// Timestamps keep microseconds (a Timestamp message, converted with timestampFromIso / timestampToIso).
import { memories, memoryQuery, Timestamp, timestampFromIso, timestampToIso, vault } from "@memory-service/client";

const clients = [memories.MemoryServiceClient, memoryQuery.MemoryQueryServiceClient, vault.VaultServiceClient];
const occurred: Timestamp = timestampFromIso("2026-11-01T10:00:00.123456Z");
const text: string = timestampToIso(occurred);
console.log(clients.length, text);
