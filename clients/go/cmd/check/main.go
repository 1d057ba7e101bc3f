// Command check calls the services with the generated Go client.
//
//	check ADDRESS NAMESPACE QUERY [TOKEN]
//
// searches query_service (ADDRESS) in a namespace, printing the number of hits and the first node key,
// or the gRPC status code of the failure (exit 1).
//
//	check every INGEST_ADDRESS QUERY_ADDRESS NAMESPACE TOKEN
//
// calls at least one RPC of every service of memory.v1 (TOKEN: write and admin on NAMESPACE and a
// memory scope), checks each answer, and prints {"services": {service: method path}} with the method
// paths the client interceptor saw succeed; a failed call prints {"failed": path, "code": code}, exit 1.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	memoryv1 "memoryservice/gen/memory/v1"
)

func main() {
	if len(os.Args) == 6 && os.Args[1] == "every" {
		every(os.Args[2], os.Args[3], os.Args[4], os.Args[5])
		return
	}
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: check ADDRESS NAMESPACE QUERY [TOKEN] | check every INGEST QUERY NAMESPACE TOKEN")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if len(os.Args) > 4 && os.Args[4] != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+os.Args[4])
	}
	conn, err := grpc.DialContext(ctx, os.Args[1], grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(1)
	}
	defer conn.Close()
	client := memoryv1.NewRetrievalServiceClient(conn)
	response, err := client.Search(ctx, &memoryv1.SearchRequest{Namespace: os.Args[2], Query: os.Args[3], TopK: 5})
	if err != nil {
		fmt.Printf("{\"code\": %q}\n", status.Code(err).String())
		os.Exit(1)
	}
	first := ""
	if len(response.Hits) > 0 {
		first = response.Hits[0].NodeKey
	}
	fmt.Printf("{\"hits\": %d, \"first\": %q}\n", len(response.Hits), first)
}

// called records the method path of every call that succeeded, by service name.
var called = map[string]string{}

func record(method string) {
	called[strings.Split(strings.TrimPrefix(method, "/"), "/")[0]] = method
}

func unaryRecorder(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil {
		fail(method, err)
	}
	record(method)
	return nil
}

func streamRecorder(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	stream, err := streamer(ctx, desc, cc, method, opts...)
	if err == nil {
		record(method) // confirmed by the answer's checks below
	}
	return stream, err
}

func fail(what string, err error) {
	out, _ := json.Marshal(map[string]string{"failed": what, "code": status.Code(err).String(), "message": fmt.Sprint(err)})
	fmt.Println(string(out))
	os.Exit(1)
}

func check(ok bool, what string) {
	if !ok {
		out, _ := json.Marshal(map[string]string{"failed": what})
		fmt.Println(string(out))
		os.Exit(1)
	}
}

func dial(ctx context.Context, address string) *grpc.ClientConn {
	conn, err := grpc.DialContext(ctx, address, grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithChainUnaryInterceptor(unaryRecorder), grpc.WithChainStreamInterceptor(streamRecorder))
	if err != nil {
		fail("dial "+address, err)
	}
	return conn
}

func every(ingestAddress, queryAddress, namespace, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	ingest, query := dial(ctx, ingestAddress), dial(ctx, queryAddress)
	defer ingest.Close()
	defer query.Close()
	occurred := timestamppb.New(time.Date(2026, 11, 1, 10, 0, 0, 123456000, time.UTC))

	// ingest_service
	recorded, _ := memoryv1.NewObservationServiceClient(ingest).RecordObservations(ctx, &memoryv1.RecordObservationsRequest{
		Observations: []*memoryv1.Observation{{
			Namespace:  namespace,
			Source:     &memoryv1.ObservationSource{System: "go", Stream: "e2e", ExternalId: "go-1"},
			Kind:       "note",
			OccurredAt: occurred,
			Subject:    &memoryv1.Participant{Type: "service", Id: "ledger"},
			Content:    "The ledger service writes to the Go-written journal.",
		}},
	})
	check(len(recorded.Results) == 1 && recorded.Results[0].Status == "processed", "observation recorded")
	observationID := recorded.Results[0].ObservationId
	asserted, _ := memoryv1.NewFactServiceClient(ingest).AssertFacts(ctx, &memoryv1.AssertFactsRequest{
		Namespace: namespace,
		Facts: []*memoryv1.FactAssertion{{
			Subject: structpb.NewStringValue("service:ledger"), Predicate: "DEPENDS_ON", Object: structpb.NewStringValue("service:journal"),
		}},
		SourcePath: "agent:go-check",
	})
	check(len(asserted.Results) == 1 && asserted.Results[0].FactId != "", "fact asserted")
	retained, _ := memoryv1.NewDocumentServiceClient(ingest).Retain(ctx, &memoryv1.RetainRequest{
		Namespace: namespace, NaturalKey: "doc:go-runbook", Title: "Ledger runbook",
		Content: "# Ledger\n\nRotate the journal before restarting the ledger.\n",
	})
	check(retained.ChunkCount >= 1, "document retained")
	reconciled, _ := memoryv1.NewSnapshotServiceClient(ingest).Reconcile(ctx, &memoryv1.ReconcileRequest{
		Namespace: namespace, Source: "go", Scope: "hosts", SnapshotId: "go-snapshot-1",
		SnapshotTime: timestamppb.New(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)),
		Entities:     []*memoryv1.EntityAssertion{{Key: structpb.NewStringValue("host:ledger-1"), Type: "host", Title: "ledger-1"}},
	})
	check(reconciled.Counts != nil, "snapshot reconciled")
	kinds, _ := memoryv1.NewDomainPackServiceClient(ingest).GetNamespaceKinds(ctx, &memoryv1.GetNamespaceKindsRequest{Namespace: namespace})
	check(kinds.Namespace == namespace, "namespace kinds read")
	traceID := "go-trace-" + namespace
	event, _ := memoryv1.NewAuditServiceClient(ingest).RecordAuditEvent(ctx, &memoryv1.RecordAuditEventRequest{
		Namespace: namespace, Action: "export", TraceId: traceID, TargetKey: "doc:go-runbook",
	})
	check(strings.HasPrefix(event.Event.EventId, "aud-"), "audit event recorded")
	added, _ := memoryv1.NewMemoryServiceClient(ingest).AddMemories(ctx, &memoryv1.AddMemoriesRequest{
		Memories: []*memoryv1.NewMemory{{Text: "The Go client prefers terse answers.", IdempotencyKey: "go-" + namespace}},
	})
	check(len(added.Results) == 1 && strings.HasPrefix(added.Results[0].MemoryId, "mem-"), "memory added")
	stream, err := memoryv1.NewVaultServiceClient(ingest).IngestVault(ctx)
	if err != nil {
		fail("/memory.v1.VaultService/IngestVault", err)
	}
	for _, part := range []*memoryv1.IngestVaultRequest{
		{Part: &memoryv1.IngestVaultRequest_Header{Header: &memoryv1.IngestVaultHeader{Namespace: namespace, DryRun: true, Source: "go"}}},
		{Part: &memoryv1.IngestVaultRequest_Documents{Documents: &memoryv1.IngestVaultDocuments{Documents: []*memoryv1.VaultDocument{{Path: "notes/go.md", Content: "# Go\n\nA note.\n"}}}}},
		{Part: &memoryv1.IngestVaultRequest_End{End: &memoryv1.IngestVaultEnd{DocumentCount: 1}}},
	} {
		if err := stream.Send(part); err != nil {
			fail("/memory.v1.VaultService/IngestVault", err)
		}
	}
	run, err := stream.CloseAndRecv()
	if err != nil {
		fail("/memory.v1.VaultService/IngestVault", err)
	}
	check(run.DryRun && len(run.Documents) == 1, "vault dry run")

	// query_service
	observed, _ := memoryv1.NewObservationQueryServiceClient(query).GetObservation(ctx, &memoryv1.GetObservationRequest{Namespace: namespace, ObservationId: observationID})
	check(observed.Observation.OccurredAt.AsTime().Equal(occurred.AsTime()), "occurred_at keeps its microseconds")
	found, _ := memoryv1.NewRetrievalServiceClient(query).Search(ctx, &memoryv1.SearchRequest{Namespace: namespace, Query: "rotate the journal", TopK: 5})
	check(len(found.Hits) > 0 && found.Hits[0].NodeKey == "doc:go-runbook", "search finds the document")
	listed, _ := memoryv1.NewFactQueryServiceClient(query).ListFacts(ctx, &memoryv1.ListFactsRequest{Namespace: namespace, Subject: "service:ledger"})
	check(len(listed.Facts) == 1 && listed.Facts[0].Object == "service:journal", "the fact is listed")
	source, _ := memoryv1.NewSourceServiceClient(query).GetSource(ctx, &memoryv1.GetSourceRequest{Namespace: namespace, NaturalKey: "doc:go-runbook"})
	check(strings.HasPrefix(source.Source.Content, "# Ledger\n"), "the original text comes back")
	compiled, _ := memoryv1.NewContextServiceClient(query).CompileContext(ctx, &memoryv1.CompileContextRequest{
		Namespace: namespace, Query: "what does the ledger depend on?", Anchors: []string{"service:ledger"}, TokenBudget: 400,
	})
	check(strings.Contains(compiled.Pack.Text, "service:journal"), "the pack holds the fact")
	trace, _ := memoryv1.NewTraceServiceClient(query).GetTrace(ctx, &memoryv1.GetTraceRequest{Namespace: namespace, TraceId: traceID})
	check(len(trace.Trace.Entries) >= 1 && trace.Trace.Entries[0].GetAuditEvent().GetEventId() == event.Event.EventId, "the trace holds the event")
	events, _ := memoryv1.NewAuditServiceClient(query).ListAuditEvents(ctx, &memoryv1.ListAuditEventsRequest{Namespace: namespace, Action: "export", PageSize: 10})
	check(len(events.Events) >= 1 && events.Events[0].EventId == event.Event.EventId, "the audit listing holds the event")
	memories, _ := memoryv1.NewMemoryQueryServiceClient(query).ListMemories(ctx, &memoryv1.ListMemoriesRequest{PageSize: 10})
	listedMemory := false
	for _, memory := range memories.Memories {
		listedMemory = listedMemory || memory.MemoryId == added.Results[0].MemoryId
	}
	check(listedMemory, "the memory is listed")
	subscriptions, _ := memoryv1.NewWebhookServiceClient(ingest).ListWebhookSubscriptions(ctx, &memoryv1.ListWebhookSubscriptionsRequest{Namespace: namespace})
	check(len(subscriptions.Subscriptions) == 0, "no webhook subscriptions")
	holds, _ := memoryv1.NewDataProtectionServiceClient(ingest).ListLegalHolds(ctx, &memoryv1.ListLegalHoldsRequest{Namespace: namespace})
	check(len(holds.Holds) == 0, "no legal holds")
	stats, _ := memoryv1.NewNamespaceServiceClient(query).GetNamespaceStats(ctx, &memoryv1.GetNamespaceStatsRequest{Namespace: namespace})
	check(stats.Namespace == namespace && stats.ChunkCount >= 1, "namespace stats counted")
	// A server stream: its first message (a change this run wrote) is enough, then the call is cancelled.
	watchCtx, stopWatching := context.WithCancel(ctx)
	changes, err := memoryv1.NewChangeFeedServiceClient(query).WatchChanges(watchCtx, &memoryv1.WatchChangesRequest{Namespace: namespace, HeartbeatSeconds: 1})
	if err != nil {
		fail("/memory.v1.ChangeFeedService/WatchChanges", err)
	}
	firstChange, err := changes.Recv()
	if err != nil {
		fail("/memory.v1.ChangeFeedService/WatchChanges", err)
	}
	stopWatching()
	check(firstChange.GetChange().GetCursor() >= 1, "a change is streamed")

	out, _ := json.Marshal(map[string]interface{}{"services": called})
	fmt.Println(string(out))
}
