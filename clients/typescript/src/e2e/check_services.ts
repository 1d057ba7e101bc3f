// Calls the running services with the generated client and checks the answers (run by
// tests/e2e/test_generated_clients.py). Usage: node dist/e2e/check_services.js NAMESPACE; environment
// (the names the services and `cb` use): CB_INGEST_ADDR, CB_QUERY_ADDR, CB_TOKEN. Prints one JSON object
// with what it saw; exits 1 on the first failed check.
import { credentials, Metadata, ServiceError, status } from "@grpc/grpc-js";
import { callMetadata, context, documents, factQuery, observations, retrieval, sources } from "../index";

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

async function main(): Promise<void> {
  const ingestAddr = process.env.CB_INGEST_ADDR ?? "127.0.0.1:50051";
  const queryAddr = process.env.CB_QUERY_ADDR ?? "127.0.0.1:50052";
  const namespace = process.argv[2] ?? "ts-client";
  const metadata = callMetadata(process.env.CB_TOKEN ?? "");
  const insecure = credentials.createInsecure();

  const observationClient = new observations.ObservationServiceClient(ingestAddr, insecure);
  const documentClient = new documents.DocumentServiceClient(ingestAddr, insecure);
  const searchClient = new retrieval.RetrievalServiceClient(queryAddr, insecure);
  const factClient = new factQuery.FactQueryServiceClient(queryAddr, insecure);
  const sourceClient = new sources.SourceServiceClient(queryAddr, insecure);
  const contextClient = new context.ContextServiceClient(queryAddr, insecure);

  const recorded = await call<observations.RecordObservationsResponse>((done) => observationClient.recordObservations(observations.RecordObservationsRequest.fromPartial({
      observations: [
        {
          namespace,
          source: { system: "typescript", stream: "e2e", externalId: "ts-1" },
          kind: "note",
          occurredAt: new Date("2026-11-01T10:00:00Z"),
          subject: { type: "service", id: "checkout" },
          content: "The checkout service now depends on the Quokkapay gateway.",
          assertions: [{ fact: { subject: "service:checkout", predicate: "DEPENDS_ON", object: "service:quokkapay" } }],
        },
      ],
    }), metadata, done));
  const result = recorded.results[0];
  check(result.observationId.startsWith("obs-") && result.status === "processed", "observation recorded");

  const retained = await call<documents.RetainResponse>((done) => documentClient.retain(documents.RetainRequest.fromPartial({
      namespace,
      naturalKey: "doc:ts-runbook",
      title: "Checkout runbook",
      content: "# Checkout\n\nRestart the Quokkapay adapter before the checkout service.\n",
      meta: { collection: "runbooks" },
    }), metadata, done));
  check(retained.naturalKey === "doc:ts-runbook" && retained.chunkCount >= 1, "document retained");

  const found = await call<retrieval.SearchResponse>((done) => searchClient.search(retrieval.SearchRequest.fromPartial({ namespace, query: "Quokkapay adapter", topK: 5, meta: { collection: "runbooks" } }), metadata, done));
  check(found.hits.length > 0 && found.hits[0].nodeKey === "doc:ts-runbook", "search finds the document");

  const listed = await call<factQuery.ListFactsResponse>((done) => factClient.listFacts(factQuery.ListFactsRequest.fromPartial({ namespace, subject: "service:checkout" }), metadata, done));
  check(listed.facts.length === 1 && listed.facts[0].object === "service:quokkapay", "the fact is listed");
  const validFrom = listed.facts[0].validFrom;
  check(validFrom instanceof Date && validFrom.toISOString() === "2026-11-01T10:00:00.000Z", "valid_from is a Date");

  const source = await call<sources.GetSourceResponse>((done) => sourceClient.getSource(sources.GetSourceRequest.fromPartial({ namespace, naturalKey: "doc:ts-runbook" }), metadata, done));
  check(source.source?.content.startsWith("# Checkout\n") === true, "the original text comes back");

  const compiled = await call<context.CompileContextResponse>((done) => contextClient.compileContext(context.CompileContextRequest.fromPartial({
      namespace,
      query: "what does checkout depend on?",
      anchors: ["service:checkout"],
      tokenBudget: 400,
    }), metadata, done));
  const pack = compiled.pack;
  check(pack !== undefined && pack.text.includes("service:quokkapay") && pack.tokenCount <= 400, "the pack holds the fact");

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

  for (const client of [observationClient, documentClient, searchClient, factClient, sourceClient, contextClient]) {
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
    }) + "\n",
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
