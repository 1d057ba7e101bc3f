// Command check calls query_service with the generated Go client: Search in a namespace, printing the
// number of hits, or the gRPC status of the failure. Usage: check ADDRESS NAMESPACE QUERY [TOKEN]
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	memoryv1 "memoryservice/gen/memory/v1"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: check ADDRESS NAMESPACE QUERY [TOKEN]")
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
