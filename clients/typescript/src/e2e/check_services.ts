// Calls the running services with the generated client and checks the answers (run by
// tests/e2e/test_generated_clients.py): at least one RPC of every service of memory.v1, with a bearer
// token, over real channels. Usage: node dist/e2e/check_services.js NAMESPACE; environment (the names the
// services and `cb` use): CB_INGEST_ADDR, CB_QUERY_ADDR, CB_TOKEN (write and admin on NAMESPACE, and a
// memory scope). Prints one JSON object with what it saw, `services` mapping each service it called to
// the method path; exits 1 on the first failed check.
import { credentials, Metadata, ServiceError, status } from "@grpc/grpc-js";
import {
  audit,
  callMetadata,
  changeFeed,
  context,
  dataProtection,
  documents,
  domainPacks,
  factQuery,
  facts,
  memories,
  memoryQuery,
  namespaces,
  observationQuery,
  observations,
  retrieval,
  snapshots,
  sources,
  timestampFromIso,
  timestampToIso,
  traces,
  vault,
  webhooks,
} from "../index";

type Callback<Res> = (error: ServiceError | null, response: Res) => void;

/** A unary call as a promise: `invoke` starts it with the callback it is given. */
function call<Res>(invoke: (done: Callback<Res>) => unknown): Promise<Res> {
  return new Promise((resolve, reject) => {
    invoke((error, response) => (error ? reject(error) : resolve(response)));
  });
}

function check(condition: boolean, what: string): void {
  if (!condition) {
    throw new Error(`check failed: ${what}`);
  }
}

/** The service's full name ("memory.v1.AuditService") of a method path ("/memory.v1.AuditService/X"). */
function serviceOf(path: string): string {
  return path.split("/")[1];
}

const OCCURRED_AT = "2026-11-01T10:00:00.123456Z";

async function main(): Promise<void> {
  const ingestAddr = process.env.CB_INGEST_ADDR ?? "127.0.0.1:50051";
  const queryAddr = process.env.CB_QUERY_ADDR ?? "127.0.0.1:50052";
  const namespace = process.argv[2] ?? "ts-client";
  const metadata = callMetadata(process.env.CB_TOKEN ?? "");
  const insecure = credentials.createInsecure();
  const called: Record<string, string> = {};
  const note = (path: string): void => {
    called[serviceOf(path)] = path;
  };

  const observationClient = new observations.ObservationServiceClient(ingestAddr, insecure);
  const factClient = new facts.FactServiceClient(ingestAddr, insecure);
  const documentClient = new documents.DocumentServiceClient(ingestAddr, insecure);
  const snapshotClient = new snapshots.SnapshotServiceClient(ingestAddr, insecure);
  const packClient = new domainPacks.DomainPackServiceClient(ingestAddr, insecure);
  const auditWriteClient = new audit.AuditServiceClient(ingestAddr, insecure);
  const memoryClient = new memories.MemoryServiceClient(ingestAddr, insecure);
  const vaultClient = new vault.VaultServiceClient(ingestAddr, insecure);
  const searchClient = new retrieval.RetrievalServiceClient(queryAddr, insecure);
  const factQueryClient = new factQuery.FactQueryServiceClient(queryAddr, insecure);
  const sourceClient = new sources.SourceServiceClient(queryAddr, insecure);
  const contextClient = new context.ContextServiceClient(queryAddr, insecure);
  const observationQueryClient = new observationQuery.ObservationQueryServiceClient(queryAddr, insecure);
  const traceClient = new traces.TraceServiceClient(queryAddr, insecure);
  const auditReadClient = new audit.AuditServiceClient(queryAddr, insecure);
  const memoryQueryClient = new memoryQuery.MemoryQueryServiceClient(queryAddr, insecure);
  const webhookClient = new webhooks.WebhookServiceClient(ingestAddr, insecure);
  const dataProtectionClient = new dataProtection.DataProtectionServiceClient(ingestAddr, insecure);
  const namespaceClient = new namespaces.NamespaceServiceClient(queryAddr, insecure);
  const changeFeedClient = new changeFeed.ChangeFeedServiceClient(queryAddr, insecure);

  // ingest_service
  const recorded = await call<observations.RecordObservationsResponse>((done) => observationClient.recordObservations(observations.RecordObservationsRequest.fromPartial({
      observations: [
        {
          namespace,
          source: { system: "typescript", stream: "e2e", externalId: "ts-1" },
          kind: "note",
          occurredAt: timestampFromIso(OCCURRED_AT),
          subject: { type: "service", id: "checkout" },
          content: "The checkout service now depends on the Quokkapay gateway.",
          assertions: [{ fact: { subject: "service:checkout", predicate: "DEPENDS_ON", object: "service:quokkapay" } }],
        },
      ],
    }), metadata, done));
  note(observations.ObservationServiceService.recordObservations.path);
  const result = recorded.results[0];
  check(result.observationId.startsWith("obs-") && result.status === "processed", "observation recorded");

  const asserted = await call<facts.AssertFactsResponse>((done) => factClient.assertFacts(facts.AssertFactsRequest.fromPartial({
      namespace,
      facts: [{ subject: "service:quokkapay", predicate: "RUNS_ON", object: "host:pay-1" }],
      sourcePath: "agent:ts-check",
    }), metadata, done));
  note(facts.FactServiceService.assertFacts.path);
  check(asserted.results.length === 1 && asserted.results[0].factId !== "", "fact asserted");

  const retained = await call<documents.RetainResponse>((done) => documentClient.retain(documents.RetainRequest.fromPartial({
      namespace,
      naturalKey: "doc:ts-runbook",
      title: "Checkout runbook",
      content: "# Checkout\n\nRestart the Quokkapay adapter before the checkout service.\n",
      meta: { collection: "runbooks" },
    }), metadata, done));
  note(documents.DocumentServiceService.retain.path);
  check(retained.naturalKey === "doc:ts-runbook" && retained.chunkCount >= 1, "document retained");

  const reconciled = await call<snapshots.ReconcileResponse>((done) => snapshotClient.reconcile(snapshots.ReconcileRequest.fromPartial({
      namespace,
      source: "typescript",
      scope: "hosts",
      snapshotId: "ts-snapshot-1",
      snapshotTime: timestampFromIso("2026-11-02T00:00:00Z"),
      entities: [{ key: "host:pay-1", type: "host", title: "pay-1" }],
    }), metadata, done));
  note(snapshots.SnapshotServiceService.reconcile.path);
  check(reconciled.counts !== undefined, "snapshot reconciled");

  const kinds = await call<domainPacks.GetNamespaceKindsResponse>((done) => packClient.getNamespaceKinds(domainPacks.GetNamespaceKindsRequest.fromPartial({ namespace }), metadata, done));
  note(domainPacks.DomainPackServiceService.getNamespaceKinds.path);
  check(Array.isArray(kinds.packages), "namespace kinds read");

  const traceId = `ts-trace-${namespace}`;
  const event = await call<audit.RecordAuditEventResponse>((done) => auditWriteClient.recordAuditEvent(audit.RecordAuditEventRequest.fromPartial({ namespace, action: "export", traceId, targetKey: "doc:ts-runbook" }), metadata, done));
  note(audit.AuditServiceService.recordAuditEvent.path);
  check(event.event?.eventId.startsWith("aud-") === true, "audit event recorded");

  const added = await call<memories.AddMemoriesResponse>((done) => memoryClient.addMemories(memories.AddMemoriesRequest.fromPartial({ memories: [{ text: "The TypeScript client prefers short answers.", idempotencyKey: `ts-${namespace}` }] }), metadata, done));
  note(memories.MemoryServiceService.addMemories.path);
  check(added.results.length === 1 && added.results[0].memoryId.startsWith("mem-"), "memory added");

  const vaultRun = await new Promise<vault.IngestVaultResponse>((resolve, reject) => {
    const stream = vaultClient.ingestVault(metadata, (error, response) => (error ? reject(error) : resolve(response)));
    stream.write(vault.IngestVaultRequest.fromPartial({ header: { namespace, dryRun: true, source: "typescript" } }));
    stream.write(vault.IngestVaultRequest.fromPartial({ documents: { documents: [{ path: "notes/ts.md", content: "# TS\n\nA note.\n" }] } }));
    stream.write(vault.IngestVaultRequest.fromPartial({ end: { documentCount: 1 } }));
    stream.end();
  });
  note(vault.VaultServiceService.ingestVault.path);
  check(vaultRun.dryRun && vaultRun.documents.length === 1, "vault dry run");

  // query_service
  const observed = await call<observationQuery.GetObservationResponse>((done) => observationQueryClient.getObservation(observationQuery.GetObservationRequest.fromPartial({ namespace, observationId: result.observationId }), metadata, done));
  note(observationQuery.ObservationQueryServiceService.getObservation.path);
  const occurredAt = observed.observation?.occurredAt;
  check(occurredAt !== undefined && timestampToIso(occurredAt) === OCCURRED_AT, "occurred_at keeps its microseconds");

  const found = await call<retrieval.SearchResponse>((done) => searchClient.search(retrieval.SearchRequest.fromPartial({ namespace, query: "Quokkapay adapter", topK: 5, meta: { collection: "runbooks" } }), metadata, done));
  note(retrieval.RetrievalServiceService.search.path);
  check(found.hits.length > 0 && found.hits[0].nodeKey === "doc:ts-runbook", "search finds the document");

  const listed = await call<factQuery.ListFactsResponse>((done) => factQueryClient.listFacts(factQuery.ListFactsRequest.fromPartial({ namespace, subject: "service:checkout" }), metadata, done));
  note(factQuery.FactQueryServiceService.listFacts.path);
  check(listed.facts.length === 1 && listed.facts[0].object === "service:quokkapay", "the fact is listed");
  const validFrom = listed.facts[0].validFrom;
  check(validFrom !== undefined && timestampToIso(validFrom) === OCCURRED_AT, "valid_from keeps its microseconds");

  const source = await call<sources.GetSourceResponse>((done) => sourceClient.getSource(sources.GetSourceRequest.fromPartial({ namespace, naturalKey: "doc:ts-runbook" }), metadata, done));
  note(sources.SourceServiceService.getSource.path);
  check(source.source?.content.startsWith("# Checkout\n") === true, "the original text comes back");

  const compiled = await call<context.CompileContextResponse>((done) => contextClient.compileContext(context.CompileContextRequest.fromPartial({
      namespace,
      query: "what does checkout depend on?",
      anchors: ["service:checkout"],
      tokenBudget: 400,
    }), metadata, done));
  note(context.ContextServiceService.compileContext.path);
  const pack = compiled.pack;
  check(pack !== undefined && pack.text.includes("service:quokkapay") && pack.tokenCount <= 400, "the pack holds the fact");

  const trace = await call<traces.GetTraceResponse>((done) => traceClient.getTrace(traces.GetTraceRequest.fromPartial({ namespace, traceId }), metadata, done));
  note(traces.TraceServiceService.getTrace.path);
  check(trace.trace?.entries.some((entry) => entry.auditEvent?.eventId === event.event?.eventId) === true, "the trace holds the event");

  const auditPage = await call<audit.ListAuditEventsResponse>((done) => auditReadClient.listAuditEvents(audit.ListAuditEventsRequest.fromPartial({ namespace, action: "export", pageSize: 10 }), metadata, done));
  note(audit.AuditServiceService.listAuditEvents.path);
  const listedEvent = auditPage.events.find((item) => item.eventId === event.event?.eventId);
  check(listedEvent?.recordTime !== undefined, "the audit listing holds the event");

  const memoryPage = await call<memoryQuery.ListMemoriesResponse>((done) => memoryQueryClient.listMemories(memoryQuery.ListMemoriesRequest.fromPartial({ pageSize: 10 }), metadata, done));
  note(memoryQuery.MemoryQueryServiceService.listMemories.path);
  check(memoryPage.memories.some((memory) => memory.memoryId === added.results[0].memoryId), "the memory is listed");

  const subscriptions = await call<webhooks.ListWebhookSubscriptionsResponse>((done) => webhookClient.listWebhookSubscriptions(webhooks.ListWebhookSubscriptionsRequest.fromPartial({ namespace }), metadata, done));
  note(webhooks.WebhookServiceService.listWebhookSubscriptions.path);
  check(subscriptions.subscriptions.length === 0, "no webhook subscriptions");

  const holds = await call<dataProtection.ListLegalHoldsResponse>((done) => dataProtectionClient.listLegalHolds(dataProtection.ListLegalHoldsRequest.fromPartial({ namespace }), metadata, done));
  note(dataProtection.DataProtectionServiceService.listLegalHolds.path);
  check(holds.holds.length === 0, "no legal holds");

  const stats = await call<namespaces.GetNamespaceStatsResponse>((done) => namespaceClient.getNamespaceStats(namespaces.GetNamespaceStatsRequest.fromPartial({ namespace }), metadata, done));
  note(namespaces.NamespaceServiceService.getNamespaceStats.path);
  check(stats.namespace === namespace && stats.chunkCount >= 1, "namespace stats counted");

  // A server stream: the first message (a change this run wrote) is enough, then the call is cancelled.
  const firstChange = await new Promise<changeFeed.WatchChangesResponse>((resolve, reject) => {
    const stream = changeFeedClient.watchChanges(changeFeed.WatchChangesRequest.fromPartial({ namespace, heartbeatSeconds: 1 }), metadata);
    stream.once("data", (message: changeFeed.WatchChangesResponse) => {
      resolve(message);
      stream.cancel();
    });
    stream.on("error", (error: ServiceError) => {
      if (error.code !== status.CANCELLED) reject(error);
    });
  });
  note(changeFeed.ChangeFeedServiceService.watchChanges.path);
  check(firstChange.change !== undefined && Number(firstChange.change.cursor) >= 1, "a change is streamed");

  let missingCode: number | undefined;
  try {
    await call<sources.GetSourceResponse>((done) => sourceClient.getSource(sources.GetSourceRequest.fromPartial({ namespace, naturalKey: "doc:none" }), metadata, done));
  } catch (error) {
    missingCode = (error as ServiceError).code;
  }
  check(missingCode === status.NOT_FOUND, "a missing key is NOT_FOUND");

  let refusedCode: number | undefined;
  try {
    await call<retrieval.SearchResponse>((done) => searchClient.search(retrieval.SearchRequest.fromPartial({ namespace, query: "x" }), new Metadata(), done));
  } catch (error) {
    refusedCode = (error as ServiceError).code;
  }

  for (const client of [
    observationClient, factClient, documentClient, snapshotClient, packClient, auditWriteClient, memoryClient, vaultClient,
    searchClient, factQueryClient, sourceClient, contextClient, observationQueryClient, traceClient, auditReadClient, memoryQueryClient,
    webhookClient, namespaceClient, changeFeedClient, dataProtectionClient,
  ]) {
    client.close();
  }
  process.stdout.write(
    JSON.stringify({
      observationId: result.observationId,
      factsCreated: result.factsCreated,
      hits: found.hits.length,
      facts: listed.facts.map((fact) => fact.factId),
      packTokens: pack?.tokenCount,
      missingCode,
      refusedCode,
      occurredAt: occurredAt === undefined ? "" : timestampToIso(occurredAt),
      auditEventId: listedEvent?.eventId,
      auditRecordTime: listedEvent?.recordTime === undefined ? "" : timestampToIso(listedEvent.recordTime),
      services: called,
    }) + "\n",
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
