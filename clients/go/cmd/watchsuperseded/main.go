// Command watchsuperseded prints every superseded ACCOUNT_MANAGER fact of namespace crm, resuming after
// the last cursor it received whenever the stream breaks (docs/how-to/change-feed.md).
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"

	memoryv1 "memoryservice/gen/memory/v1"
)

func notifyTeam(subject string, was, successor interface{}) {
	fmt.Println(subject, "was", was, "successor", successor)
}

func main() {
	ctx := context.Background()
	conn, err := grpc.DialContext(ctx, "127.0.0.1:50052", grpc.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := memoryv1.NewChangeFeedServiceClient(conn)
	var last int64 // load the cursor you stored; 0: from the oldest change kept
	for {
		stream, err := client.WatchChanges(ctx, &memoryv1.WatchChangesRequest{
			Namespace: "crm", ResumeAfter: last,
			EventTypes: []string{"fact.superseded"}, Predicates: []string{"ACCOUNT_MANAGER"},
		})
		for err == nil {
			var msg *memoryv1.WatchChangesResponse
			if msg, err = stream.Recv(); err != nil {
				break
			}
			if change := msg.GetChange(); change != nil {
				fact := change.Payload.AsMap()
				notifyTeam(change.SubjectKey, fact["object"], fact["superseded_by"])
				last = change.Cursor // store it after the work: a restart resumes after it
			} else {
				last = msg.GetHeartbeat().Cursor
			}
		}
		time.Sleep(time.Second) // the stream broke: resume after the last cursor
	}
}
